package dedup

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/annexd/annexd/internal/roots"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// Mode is how a duplicate is made to share its keeper's storage.
type Mode uint8

// The modes.
const (
	// Reflink shares extents with FIDEDUPERANGE. Every file keeps its inode,
	// its metadata and its independence: a later write to one copies.
	Reflink Mode = iota
	// Hardlink replaces a duplicate's name with a link to the keeper. The
	// names then share one inode, so a write through one shows in all.
	Hardlink
	// Trash moves each duplicate to the freedesktop.org trash of its file
	// system, where any file manager can restore it (trash.go).
	Trash
)

// String returns the mode's flag name.
func (m Mode) String() string {
	switch m {
	case Hardlink:
		return "hardlink"
	case Trash:
		return "trash"
	}
	return "reflink"
}

// journaled reports a mode that writes intents before it acts.
func (m Mode) journaled() bool { return m == Hardlink || m == Trash }

// PlanOptions narrow a plan.
type PlanOptions struct {
	Mode    Mode
	Paths   [][]byte // absolute, clean; a file or a directory and all below it; none: everything
	MinSize int64    // files smaller are left out; empty files are always left out
	Keep    Keep     // which copy of each group stays; zero: the default order
}

// File is one path of a duplicate group, with the record it was planned from.
type File struct {
	Path   []byte
	Record store.Record
}

// Action makes one inode share the keeper's storage.
type Action struct {
	// Targets are the names of the inode to act on. Reflink needs only
	// one; hardlink relinks every name, or freeing nothing would be done.
	Targets []File
	Frees   int64 // bytes the index expects this action to free: the file's size
}

// Group is the plan for the duplicates of one digest on one file system.
type Group struct {
	Backend key.Backend // the base backend
	Digest  []byte
	Size    int64
	Dev     uint64
	Keeper  File // the file the others come to share
	// KeeperNames are all the keeper's names in the index, in the request
	// or not: a link to the keeper changes their ctime.
	KeeperNames [][]byte
	Actions     []Action
	Frees       int64 // sum of the actions' Frees
}

// Plan is what a run will do, derived from the index alone.
type Plan struct {
	Mode    Mode
	Groups  []Group
	Actions int   // number of actions in all groups
	Frees   int64 // bytes the run is expected to free
	// Shared counts the actions a survey found done already: the target
	// shares all its blocks with the keeper. They are not in Groups.
	Shared int
	// NoBlocks counts the targets a survey found holding no blocks of
	// their own (inline in the metadata, or sparse): nothing to free.
	NoBlocks int
	// Unsupported names the file systems that cannot share extents. Their
	// groups stay in the plan; a run skips them.
	Unsupported []*UnsupportedError
}

// Add appends g's groups to p.
func (p *Plan) Add(gs ...Group) {
	for _, g := range gs {
		p.Groups = append(p.Groups, g)
		p.Actions += len(g.Actions)
		p.Frees += g.Frees
	}
}

// MakePlan plans every group with PlanGroup.
func MakePlan(groups []store.Group, opt PlanOptions) Plan {
	p := Plan{Mode: opt.Mode}
	for _, g := range groups {
		p.Add(PlanGroup(g, opt)...)
	}
	return p
}

// annexStore is the part of a path inside git-annex's object store: under
// .git/annex/objects, or annex/objects in a bare repository.
var annexStore = []byte("/annex/objects/")

// inAnnexStore reports a member in git-annex's object store (indexed with
// [ignore] annex_objects, or in a bare repository). Hardlink mode leaves
// it alone: a link would let an edit through the other name rewrite an
// object git-annex trusts to hold its key.
func inAnnexStore(m store.Member) bool { return bytes.Contains(m.Path, annexStore) }

// inode is the members of a group that share one (dev, ino).
type inode struct {
	dev, ino uint64
	names    []File // sorted by path
	all      int    // names in the group, inside the request or not
}

// PlanGroup plans one duplicate group from the index: one Group per file
// system holding at least two of its inodes inside the request.
//
// Members are the group's paths. Names of one inode are one file, never
// duplicates of each other. Files outside opt.Paths or smaller than
// opt.MinSize are left out, and so is a member whose size is not the
// group's. Files on different file systems never share storage, so each
// device is planned apart. In hardlink mode an inode with a name outside
// the request is left out: relinking only some of its names frees nothing;
// so is a file in git-annex's object store (inAnnexStore).
//
// The keeper of each device is the one opt.Keep picks (keep.go), its
// ties broken by the default order: the inode with the most names in the
// request (hard links stay as they are, and hardlink mode relinks fewest
// names), then the one with the oldest mtime (the original is usually
// older than its copies), then the one with the smallest path. Under
// KeepUnder a device with no copy in the folder is left out, and every
// copy there stays as it is. Trash mode plans as hardlink mode does: a
// name left in place would keep the inode's blocks.
func PlanGroup(g store.Group, opt PlanOptions) []Group {
	return planGroup(g, opt, nil)
}

// planGroup is PlanGroup after a survey of the group's inodes: in
// reflink mode the keeper is then first the inode holding the fewest
// bytes alone, so that sharing its blocks frees the most (an inode that
// shares its blocks already, with a twin or a snapshot, gives nothing
// back as a target).
func planGroup(g store.Group, opt PlanOptions, sv *store.Survey) []Group {
	if g.Size <= 0 || g.Size < opt.MinSize {
		return nil
	}
	if opt.Mode != Reflink {
		g.Members = slices.DeleteFunc(slices.Clone(g.Members), inAnnexStore)
	}
	var out []Group
	for _, inodes := range byDevice(g, opt.Paths) {
		if len(inodes) < 2 {
			continue
		}
		slices.SortFunc(inodes, func(a, b *inode) int {
			if c := opt.Keep.compare(a, b); c != 0 {
				return c
			}
			if sv != nil && opt.Mode == Reflink {
				if c := cmp.Compare(aloneOf(sv, a, g.Size), aloneOf(sv, b, g.Size)); c != 0 {
					return c
				}
			}
			return keeperFirst(a, b)
		})
		if opt.Keep.Rule == KeepUnder && !opt.Keep.protects(inodes[0]) {
			continue
		}
		pg := Group{Backend: g.Backend, Digest: g.Digest, Size: g.Size, Dev: inodes[0].dev, Keeper: opt.Keep.keeperName(inodes[0]),
			KeeperNames: namesOf(g, inodes[0])}
		for _, in := range inodes[1:] {
			if opt.Keep.protects(in) {
				continue
			}
			a, ok := action(in, opt.Mode, g.Size)
			if ok {
				pg.Actions = append(pg.Actions, a)
				pg.Frees += a.Frees
			}
		}
		if len(pg.Actions) > 0 {
			out = append(out, pg)
		}
	}
	return out
}

// byDevice groups the members by device and inode, keeping the names
// inside paths. Devices come out in increasing order, so plans are stable.
func byDevice(g store.Group, paths [][]byte) [][]*inode {
	type id struct{ dev, ino uint64 }
	inodes := map[id]*inode{}
	var order []id
	for _, m := range g.Members {
		if m.Record.Size != g.Size {
			continue
		}
		k := id{m.Record.Dev, m.Record.Ino}
		in := inodes[k]
		if in == nil {
			in = &inode{dev: k.dev, ino: k.ino}
			inodes[k] = in
			order = append(order, k)
		}
		in.all++
		if within(m.Path, paths) {
			in.names = append(in.names, File{Path: m.Path, Record: m.Record})
		}
	}
	slices.SortFunc(order, func(a, b id) int {
		return cmp.Or(cmp.Compare(a.dev, b.dev), cmp.Compare(a.ino, b.ino))
	})
	var out [][]*inode
	for _, k := range order {
		in := inodes[k]
		if len(in.names) == 0 {
			continue
		}
		slices.SortFunc(in.names, func(a, b File) int { return bytes.Compare(a.Path, b.Path) })
		if n := len(out); n == 0 || out[n-1][0].dev != k.dev {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], in)
	}
	return out
}

// namesOf returns every member path of g on in's inode.
func namesOf(g store.Group, in *inode) [][]byte {
	var out [][]byte
	for _, m := range g.Members {
		if m.Record.Dev == in.dev && m.Record.Ino == in.ino {
			out = append(out, m.Path)
		}
	}
	return out
}

// keeperFirst orders inodes by how fit each is to be the keeper.
func keeperFirst(a, b *inode) int {
	return cmp.Or(
		-cmp.Compare(len(a.names), len(b.names)),
		cmp.Compare(a.names[0].Record.MtimeNs, b.names[0].Record.MtimeNs),
		bytes.Compare(a.names[0].Path, b.names[0].Path),
	)
}

// aloneOf is what the survey found in holds alone; size when it has no word.
func aloneOf(sv *store.Survey, in *inode, size int64) int64 {
	if i := sv.Find(in.dev, in.ino); i >= 0 {
		return sv.Inodes[i].Alone
	}
	return size
}

// action is what makes in share the keeper's storage, if anything can.
func action(in *inode, mode Mode, size int64) (Action, bool) {
	if mode != Reflink {
		if len(in.names) < in.all {
			return Action{}, false
		}
		return Action{Targets: in.names, Frees: size}, true
	}
	return Action{Targets: in.names[:1], Frees: size}, true
}

// within reports whether p is one of paths or below one; no paths: all.
func within(p []byte, paths [][]byte) bool {
	if len(paths) == 0 {
		return true
	}
	for _, d := range paths {
		if roots.Within(string(p), string(d)) {
			return true
		}
	}
	return false
}
