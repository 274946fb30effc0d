// Package annexlink reads the key a git-annex symlink names: a locked
// annexed file is a symlink into annex/objects whose last component is
// the key, escaped as git-annex escapes key file names. It reads what
// "git annex lookupkey" reads, without git or the annex's content.
package annexlink

import (
	"os"
	"strings"

	"github.com/annexd/annexd/key"
)

// objectsDir appears in every link into an annex's object store, as
// git-annex's isLinkToAnnex requires ("/annex/objects").
const objectsDir = "/annex/objects/"

// maxTarget is the longest link target looked at, as git-annex bounds
// its symlinks (8 KiB).
const maxTarget = 8192

// Key returns the key the symlink at path names, and false when path is
// not a symlink into an annex's object store or its last component is
// not a key.
func Key(path string) (key.Key, bool) {
	target, err := os.Readlink(path)
	if err != nil {
		return key.Key{}, false
	}
	return FromTarget(target)
}

// FromTarget returns the key a symlink target names (see Key).
func FromTarget(target string) (key.Key, bool) {
	if len(target) > maxTarget || !strings.Contains(target, objectsDir) {
		return key.Key{}, false
	}
	name := target[strings.LastIndexByte(target, '/')+1:]
	k, err := key.Parse(unescape(name))
	if err != nil {
		return key.Key{}, false
	}
	return k, true
}

// unescape reverses git-annex's keyFile: "%" stands for "/", "&c" for
// ":", "&s" for "%" and "&a" for "&".
func unescape(name string) string {
	if !strings.ContainsAny(name, "%&") {
		return name
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '%':
			b.WriteByte('/')
		case c == '&' && i+1 < len(name) && strings.IndexByte("csa", name[i+1]) >= 0:
			b.WriteByte(":%&"[strings.IndexByte("csa", name[i+1])])
			i++
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
