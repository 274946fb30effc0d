package dedup

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// KeepRule says which copy of a group stays as the keeper.
type KeepRule uint8

// The rules. Each breaks its ties by the default order (keeperFirst).
const (
	// KeepDefault is the engine's own choice: the inode with the most
	// names, then the oldest, then the smallest path; in reflink mode after
	// a survey, first the one holding fewest bytes alone.
	KeepDefault  KeepRule = iota
	KeepNewest            // the copy with the latest mtime
	KeepOldest            // the copy with the earliest mtime
	KeepShortest          // the copy with the shortest path, in bytes
	KeepUnder             // a copy under Keep.Dir; every copy there stays
)

// Keep is the rule a plan picks keepers by.
type Keep struct {
	Rule KeepRule
	Dir  []byte // KeepUnder's folder: absolute and clean
}

// ErrKeep: a --keep value that is not a rule.
var ErrKeep = errors.New("dedup: bad keep rule")

// ParseKeep reads a rule as the CLI spells it: "", "newest", "oldest",
// "shortest-path" or "under=DIR" with DIR absolute.
func ParseKeep(s string) (Keep, error) {
	switch s {
	case "":
		return Keep{}, nil
	case "newest":
		return Keep{Rule: KeepNewest}, nil
	case "oldest":
		return Keep{Rule: KeepOldest}, nil
	case "shortest-path":
		return Keep{Rule: KeepShortest}, nil
	}
	dir, ok := strings.CutPrefix(s, "under=")
	if !ok {
		return Keep{}, fmt.Errorf("%w %q: give newest, oldest, shortest-path or under=DIR", ErrKeep, s)
	}
	if !filepath.IsAbs(dir) {
		return Keep{}, fmt.Errorf("%w %q: DIR must be absolute", ErrKeep, s)
	}
	return Keep{Rule: KeepUnder, Dir: []byte(filepath.Clean(dir))}, nil
}

// String is the rule as ParseKeep reads it.
func (k Keep) String() string {
	switch k.Rule {
	case KeepNewest:
		return "newest"
	case KeepOldest:
		return "oldest"
	case KeepShortest:
		return "shortest-path"
	case KeepUnder:
		return "under=" + string(k.Dir)
	}
	return ""
}

// compare orders two inodes by the rule alone: the one to keep first,
// 0 when the rule cannot tell them apart.
func (k Keep) compare(a, b *inode) int {
	switch k.Rule {
	case KeepNewest:
		return -cmp.Compare(newest(a), newest(b))
	case KeepOldest:
		return cmp.Compare(oldest(a), oldest(b))
	case KeepShortest:
		return cmp.Compare(shortest(a), shortest(b))
	case KeepUnder:
		return -cmp.Compare(k.holds(a), k.holds(b))
	}
	return 0
}

// holds reports whether a name of in lies in Keep.Dir, as 1 or 0.
func (k Keep) holds(in *inode) int {
	for _, n := range in.names {
		if within(n.Path, [][]byte{k.Dir}) {
			return 1
		}
	}
	return 0
}

// protects reports whether the rule keeps in as it is although it is
// not the keeper: under=DIR leaves every copy in DIR alone.
func (k Keep) protects(in *inode) bool { return k.Rule == KeepUnder && k.holds(in) == 1 }

// newest is the latest mtime among in's names (one inode: one mtime,
// unless the records disagree while the index catches up).
func newest(in *inode) int64 {
	m := in.names[0].Record.MtimeNs
	for _, n := range in.names[1:] {
		m = max(m, n.Record.MtimeNs)
	}
	return m
}

func oldest(in *inode) int64 {
	m := in.names[0].Record.MtimeNs
	for _, n := range in.names[1:] {
		m = min(m, n.Record.MtimeNs)
	}
	return m
}

// shortest is the length of in's shortest name.
func shortest(in *inode) int {
	m := len(in.names[0].Path)
	for _, n := range in.names[1:] {
		m = min(m, len(n.Path))
	}
	return m
}

// keeperName is the name of in the keeper is known by: under KeepUnder
// one in Dir, under KeepShortest the shortest, else the smallest path.
func (k Keep) keeperName(in *inode) File {
	best := in.names[0]
	for _, n := range in.names[1:] {
		switch {
		case k.Rule == KeepUnder && !within(best.Path, [][]byte{k.Dir}) && within(n.Path, [][]byte{k.Dir}):
			best = n
		case k.Rule == KeepShortest && len(n.Path) < len(best.Path):
			best = n
		}
	}
	return best
}
