package e2e

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/annexd/annexd/key"
)

// TestRandomChangesMatchTruth changes a tree at random while the daemon
// runs (and once while it is stopped) and, once the daemon is idle after
// each round, compares what
// annexctl says with digests computed here from the files: every file is
// current with its true key, no deleted file is indexed, and dups lists
// exactly the true duplicate groups with their duplicate bytes.
func TestRandomChangesMatchTruth(t *testing.T) {
	t.Parallel()
	seed := uint64(1)
	if s := os.Getenv("ANNEXD_SOAK_SEED"); s != "" { // other seeds, for a longer hunt
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("ANNEXD_SOAK_SEED=%q: %v", s, err)
		}
		seed = n
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	base, err := os.MkdirTemp("", "e2e-soak")
	if err != nil {
		t.Fatal(err)
	}
	base, _ = filepath.EvalSymlinks(base)
	t.Cleanup(func() { os.RemoveAll(base) })
	root := filepath.Join(base, "root")
	m := &mutator{t: t, rng: rng, root: root, keepMtime: true}
	m.populate(40, 300)

	d := startOn(t, base, root)
	m.explain(compareWithTruth(t, d, "initial index"))
	for round := 1; round <= 3; round++ {
		m.change(120)
		d.waitIdle()
		m.explain(compareWithTruth(t, d, fmt.Sprintf("live round %d", round)))
	}
	d.stop()
	// While the daemon is down, a rewrite that sets the mtime back and a
	// rename of the same file leave nothing to tell them from a rename
	// alone (the indexer's documented limit): offline rewrites move the
	// mtime.
	m.keepMtime = false
	m.change(120)
	d = startOn(t, base, root)
	m.explain(compareWithTruth(t, d, "after changes while stopped"))
}

// explain logs the changes that touched the files named in wrong (by the
// first component of their base name, which every change keeps).
func (m *mutator) explain(wrong []string) {
	for _, p := range wrong {
		stem := filepath.Base(p)
		if i := strings.LastIndexByte(stem, '_'); i >= 0 {
			stem = stem[i+1:]
		}
		stem, _, _ = strings.Cut(stem, ".")
		re := regexp.MustCompile(`[/_]` + regexp.QuoteMeta(stem) + `([^0-9]|$)`)
		for _, l := range m.log {
			if re.MatchString(l) {
				m.t.Logf("  history of %s: %s", stem, l)
			}
		}
	}
}

// mutator makes seeded random changes under root.
type mutator struct {
	t     *testing.T
	rng   *rand.Rand
	root  string
	n     int
	dirs  []string
	files []string
	log   []string // what was done, for failure messages
	// keepMtime: rewrites set the mtime back, so only ctime shows them
	keepMtime bool
	// moved are the directories renamed in this round of changes.
	moved []string
}

func (m *mutator) populate(dirs, files int) {
	m.dirs = []string{m.root}
	for i := range dirs {
		d := filepath.Join(m.dirs[m.rng.IntN(len(m.dirs))], fmt.Sprintf("d%d", i))
		m.mkdir(d)
		m.dirs = append(m.dirs, d)
	}
	exts := []string{".txt", ".JPG", ".jpg", ".tar.gz", "", ".verylongext", ".c"}
	for i := range files {
		p := filepath.Join(m.dirs[m.rng.IntN(len(m.dirs))], fmt.Sprintf("f%d%s", i, exts[m.rng.IntN(len(exts))]))
		if i > 10 && m.rng.IntN(6) == 0 { // about one in six a copy of an earlier file
			m.copyFile(m.files[m.rng.IntN(len(m.files))], p)
		} else {
			m.writeFile(p, m.content())
		}
		m.files = append(m.files, p)
	}
}

func (m *mutator) content() []byte {
	n := m.rng.IntN(40000)
	if m.rng.IntN(20) == 0 {
		n = 0
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(m.rng.Uint32())
	}
	return b
}

// change makes n random changes: rewrites that keep size and mtime,
// appends, truncations, replacements by rename, renames, moves of files
// and directories, deletions, copies, hardlinks and new trees.
func (m *mutator) change(n int) {
	m.moved = nil
	ops := []func(string){m.rewrite, m.appendTo, m.truncate, m.replace, m.rename, m.move, m.remove,
		m.duplicate, m.hardlink, m.newTree, m.moveDir}
	for range n {
		m.n++
		f := m.files[m.rng.IntN(len(m.files))]
		if _, err := os.Lstat(f); err != nil {
			continue // removed, or moved with its directory under another name
		}
		i := m.rng.IntN(len(ops))
		m.log = append(m.log, fmt.Sprintf("%d %s %s", m.n, opNames[i], f))
		ops[i](f)
	}
}

var opNames = []string{"rewrite", "append", "truncate", "replace", "rename", "move", "remove",
	"duplicate", "hardlink", "newTree", "moveDir"}

func (m *mutator) rewrite(f string) {
	st, err := os.Stat(f)
	if err != nil || st.Size() == 0 {
		return
	}
	fh, err := os.OpenFile(f, os.O_WRONLY, 0)
	if err != nil {
		m.t.Fatal(err)
	}
	b := make([]byte, min(st.Size(), 512))
	for i := range b {
		b[i] = byte(m.rng.Uint32())
	}
	_, err = fh.WriteAt(b, m.rng.Int64N(st.Size()-int64(len(b))+1))
	m.check(err, fh.Close())
	if m.keepMtime && !m.underMoved(f) {
		m.check(os.Chtimes(f, st.ModTime(), st.ModTime()))
	}
}

// underMoved reports whether f is under a directory renamed in this round.
// Until the watcher has read that rename and watches the new name, a
// write there reaches no watch; a rewrite that also sets the mtime back
// then leaves no trace, and annexd flags it "changed without a trace"
// rather than take the new bytes for the key (docs/cli.md). The soak
// test's rewrites there move the mtime.
func (m *mutator) underMoved(f string) bool {
	for _, d := range m.moved {
		if strings.HasPrefix(f, d+"/") {
			return true
		}
	}
	return false
}

func (m *mutator) appendTo(f string) {
	fh, err := os.OpenFile(f, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		m.t.Fatal(err)
	}
	_, err = fh.Write(m.content())
	m.check(err, fh.Close())
}

func (m *mutator) truncate(f string) {
	st, err := os.Stat(f)
	m.check(err)
	m.check(os.Truncate(f, m.rng.Int64N(st.Size()+1)))
}

// replace writes a new version beside f and renames it over f, as editors
// save.
func (m *mutator) replace(f string) {
	tmp := f + ".tmp~"
	m.writeFile(tmp, m.content())
	m.check(os.Rename(tmp, f))
}

func (m *mutator) rename(f string) {
	m.check(os.Rename(f, f+fmt.Sprintf(".r%d", m.n)))
	m.files = append(m.files, f+fmt.Sprintf(".r%d", m.n))
}

func (m *mutator) move(f string) {
	dst := filepath.Join(m.dir(), fmt.Sprintf("m%d_%s", m.n, filepath.Base(f)))
	m.check(os.Rename(f, dst))
	m.files = append(m.files, dst)
}

func (m *mutator) remove(f string) { m.check(os.Remove(f)) }

func (m *mutator) duplicate(f string) {
	dst := filepath.Join(m.dir(), fmt.Sprintf("c%d_%s", m.n, filepath.Base(f)))
	m.copyFile(f, dst)
	m.files = append(m.files, dst)
}

func (m *mutator) hardlink(f string) {
	dst := filepath.Join(m.dir(), fmt.Sprintf("l%d_%s", m.n, filepath.Base(f)))
	m.check(os.Link(f, dst))
	m.files = append(m.files, dst)
}

// newTree makes a/b/c with files in it at once, as mkdir -p and an unpack do.
func (m *mutator) newTree(string) {
	d := filepath.Join(m.dir(), fmt.Sprintf("t%d", m.n), "a", "b", "c")
	m.mkdir(d)
	m.dirs = append(m.dirs, d)
	for i := range 1 + m.rng.IntN(8) {
		p := filepath.Join(d, fmt.Sprintf("n%d.txt", i))
		m.writeFile(p, m.content())
		m.files = append(m.files, p)
	}
}

// moveDir moves f's directory (not the root) under another directory.
func (m *mutator) moveDir(f string) {
	src := filepath.Dir(f)
	parent := m.dir()
	if src == m.root || parent == src || strings.HasPrefix(parent, src+"/") {
		return
	}
	dst := filepath.Join(parent, fmt.Sprintf("md%d_%s", m.n, filepath.Base(src)))
	m.check(os.Rename(src, dst))
	moved := func(p string) string {
		if p == src || strings.HasPrefix(p, src+"/") {
			return dst + p[len(src):]
		}
		return p
	}
	for i := range m.dirs {
		m.dirs[i] = moved(m.dirs[i])
	}
	for i := range m.files {
		m.files[i] = moved(m.files[i])
	}
	for i := range m.moved {
		m.moved[i] = moved(m.moved[i])
	}
	m.moved = append(m.moved, dst)
}

// dir is a random existing directory.
func (m *mutator) dir() string {
	for {
		d := m.dirs[m.rng.IntN(len(m.dirs))]
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
	}
}

func (m *mutator) mkdir(d string) { m.check(os.MkdirAll(d, 0o755)) }

func (m *mutator) writeFile(p string, b []byte) { m.check(os.WriteFile(p, b, 0o644)) }

func (m *mutator) copyFile(src, dst string) {
	b, err := os.ReadFile(src)
	m.check(err)
	m.writeFile(dst, b)
}

func (m *mutator) check(errs ...error) {
	m.t.Helper()
	for _, err := range errs {
		if err != nil {
			m.t.Fatal(err)
		}
	}
}

// truthFile is what a file holds now.
type truthFile struct {
	key   string
	size  int64
	inode [2]uint64
}

// truth walks root and hashes every regular file.
func truth(t *testing.T, root string) map[string]truthFile {
	t.Helper()
	out := map[string]truthFile{}
	err := filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		k, err := key.FromDigest(key.SHA256E, sum[:], int64(len(b)), filepath.Base(p), key.ExtRule{})
		if err != nil {
			return err
		}
		sys := st.Sys().(*syscall.Stat_t)
		out[p] = truthFile{key: k.String(), size: int64(len(b)), inode: [2]uint64{sys.Dev, sys.Ino}}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// compareWithTruth checks lookup, status and dups against the files.
func compareWithTruth(t *testing.T, d *daemon, label string) (wrong []string) {
	t.Helper()
	want := truth(t, d.root)
	paths := make([]string, 0, len(want))
	for p := range want {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	r := d.ctl(strings.Join(paths, "\x00")+"\x00", "lookup", "--batch", "-z", "--json")
	answers := 0
	for line := range strings.Lines(r.stdout) {
		var o struct{ Path, State, Key, Message string }
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("%s: lookup --json line %q: %v", label, line, err)
		}
		answers++
		if w := want[o.Path]; o.State != "current" || o.Key != w.key {
			wrong = append(wrong, o.Path)
			t.Errorf("%s: %s: %s %s (%s), want current %s", label, o.Path, o.State, o.Key, o.Message, w.key)
		}
	}
	if answers != len(paths) {
		t.Errorf("%s: %d lookup answers for %d files (exit %d, %s)", label, answers, len(paths), r.code, r.stderr)
	}
	var st struct{ Files int }
	if r = d.ctl("", "status", "--json"); json.Unmarshal([]byte(r.stdout), &st) != nil || st.Files != len(want) {
		t.Errorf("%s: status says %d files, the tree has %d (%s)", label, st.Files, len(want), r.stdout)
	}
	if got, exp := dupGroups(t, d), trueGroups(want); !slices.Equal(got, exp) {
		t.Errorf("%s: dups:\n%s\nwant:\n%s", label, strings.Join(got, "\n"), strings.Join(exp, "\n"))
		for _, g := range got {
			for _, p := range strings.Fields(g)[1:] { // the soak's names have no spaces
				if _, ok := want[p]; !ok {
					wrong = append(wrong, p)
					t.Errorf("%s: dups lists %s, which does not exist", label, p)
				}
			}
		}
	}
	t.Logf("%s: %d files, %d duplicate groups: compared", label, len(want), len(trueGroups(want)))
	return wrong
}

// trueGroups lists the duplicate groups of files: "duplicate bytes path path ...",
// sorted, for files of at least one byte on two or more inodes.
func trueGroups(files map[string]truthFile) []string {
	byDigest := map[string][]string{}
	for p, f := range files {
		if f.size > 0 {
			digest := f.key[strings.Index(f.key, "--")+2:][:64]
			byDigest[digest] = append(byDigest[digest], p)
		}
	}
	var out []string
	for _, ps := range byDigest {
		inodes := map[[2]uint64]bool{}
		for _, p := range ps {
			inodes[files[p].inode] = true
		}
		if len(inodes) < 2 {
			continue
		}
		slices.Sort(ps)
		out = append(out, fmt.Sprint(files[ps[0]].size*int64(len(inodes)-1), " ", strings.Join(ps, " ")))
	}
	slices.Sort(out)
	return out
}

// dupGroups is annexctl dups --json in trueGroups' form.
func dupGroups(t *testing.T, d *daemon) []string {
	t.Helper()
	r := d.ctl("", "dups", "--json")
	if r.code != 0 {
		t.Fatalf("dups --json: exit %d: %s", r.code, r.stderr)
	}
	var out []string
	for line := range strings.Lines(r.stdout) {
		var g struct {
			Duplicate int64 `json:"duplicate_bytes"`
			Files     []struct {
				Path    string
				PathB64 string `json:"path_b64"`
			}
		}
		if err := json.Unmarshal([]byte(line), &g); err != nil {
			t.Fatalf("dups --json line %q: %v", line, err)
		}
		var ps []string
		for _, f := range g.Files {
			p := f.Path
			if f.PathB64 != "" {
				b, _ := base64.StdEncoding.DecodeString(f.PathB64)
				p = string(b)
			}
			ps = append(ps, p)
		}
		slices.Sort(ps)
		out = append(out, fmt.Sprint(g.Duplicate, " ", strings.Join(ps, " ")))
	}
	slices.Sort(out)
	return out
}
