// Package version says which build of annexd runs: the version stamped
// at build time, else the main module's, else the source's revision.
package version

import (
	"runtime/debug"
	"strings"
)

// Stamp is the version a build was given, as the Dockerfile and the
// install steps do:
//
//	go build -ldflags "-X github.com/annexd/annexd/internal/version.Stamp=1.2.3" ./cmd/...
//
// Empty: none was given.
var Stamp string

// String returns the version: Stamp when given; else the main module's
// version, which go install module@version sets and a build in a git
// checkout stamps (v0.0.0-date-commit); else the commit the build info
// names; else "devel", for a build from a source tree without a stamp.
func String() string {
	if s := strings.TrimSpace(Stamp); s != "" {
		return s
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return fromBuildInfo(bi)
}

// fromBuildInfo is String without a Stamp.
func fromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += "-dirty"
	}
	return "devel-" + rev
}
