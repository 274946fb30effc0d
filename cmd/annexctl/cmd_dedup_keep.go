package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/annexd/annexd/api"
)

// keepRequest adds --trash and --keep to a dedup request: the rule, with
// under=DIR made absolute, and the caller's data home for the home trash.
func keepRequest(req *api.DedupRequest, f dedupFlags, cwd string) error {
	if f.trash && f.hardlink {
		return &exitError{Code: exitUsage, Err: errors.New("dedup: give --hardlink or --trash, not both")}
	}
	req.Trash = f.trash
	keep, err := keepRule(f.keep, cwd)
	if err != nil {
		return &exitError{Code: exitUsage, Err: err}
	}
	req.Keep = keep
	if f.trash {
		req.DataHome = []byte(dataHome())
	}
	return nil
}

// keepRule checks a --keep value and makes under=DIR absolute.
func keepRule(s, cwd string) (string, error) {
	switch s {
	case "", "newest", "oldest", "shortest-path":
		return s, nil
	}
	dir, ok := strings.CutPrefix(s, "under=")
	if !ok || dir == "" {
		return "", fmt.Errorf("dedup: --keep %q: give newest, oldest, shortest-path or under=DIR", s)
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(cwd, dir)
	}
	return "under=" + filepath.Clean(dir), nil
}

// dataHome is $XDG_DATA_HOME, or ~/.local/share, or "" without a home.
func dataHome() string {
	if d := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		return d
	}
	if h := os.Getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".local", "share")
	}
	return ""
}
