package dedup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/internal/trash"
	"github.com/annexd/annexd/store"
)

// trashed lists the trash of fs: each name in files/ with the original
// path its info file gives, "" when it has none. It fails the test for an
// info file without its file.
func trashed(t *testing.T, fs *loopfs.FS) map[string]string {
	t.Helper()
	out := trashList(fs)
	infos, _ := filepath.Glob(fs.Path(".Trash-0", "info", "*.trashinfo"))
	for _, i := range infos {
		if _, ok := out[strings.TrimSuffix(filepath.Base(i), ".trashinfo")]; !ok {
			t.Errorf("an info file without its file: %s", i)
		}
	}
	return out
}

// trashList is trashed without the check.
func trashList(fs *loopfs.FS) map[string]string {
	b := trash.Bin{Dir: fs.Path(".Trash-0"), Top: fs.Dir}
	out := map[string]string{}
	names, _ := filepath.Glob(filepath.Join(b.Dir, "files", "*"))
	for _, n := range names {
		text, err := os.ReadFile(filepath.Join(b.Dir, "info", filepath.Base(n)+".trashinfo"))
		in, perr := b.Parse(text)
		if err != nil || perr != nil {
			out[filepath.Base(n)] = ""
			continue
		}
		out[filepath.Base(n)] = in.Path
	}
	return out
}

// TestTrash moves the copies on ext4 to $topdir/.Trash-0, keeping the
// newest; a second group's copy of the same name becomes NAME.2. Each
// trashed file has its bytes and an info file with its old path, and the
// index is asked to look at each old name again.
func TestTrash(t *testing.T) {
	t.Parallel()
	a, b := content(1, 9000), content(2, 5000)
	fs, st, _ := hardlinkSetup(t, map[string][]byte{
		"x/photo.jpg": a, "y/photo.jpg": a, "new/a.jpg": a,
		"x/b/photo.jpg": b, "new/b.jpg": b,
	})
	now := time.Now()
	for i, n := range []string{"x/photo.jpg", "y/photo.jpg", "x/b/photo.jpg"} {
		old := now.Add(-time.Duration(i+1) * time.Hour)
		os.Chtimes(fs.Path(n), old, old)
	}
	recordAll(t, st, fs, "x/photo.jpg", "y/photo.jpg", "new/a.jpg", "x/b/photo.jpg", "new/b.jpg")
	var rehashed rehashLog
	d := New(st, Options{Intents: NewMetaIntents(st), Indexer: &rehashed})
	k, _ := ParseKeep("newest")
	_, res, err := runDedup(t, d, Request{PlanOptions: PlanOptions{Mode: Trash, Keep: k}})
	if err != nil || res.Done != 3 || len(res.Skips) > 0 {
		t.Fatalf("run: %+v, %v", res, err)
	}
	for _, n := range []string{"x/photo.jpg", "y/photo.jpg", "x/b/photo.jpg"} {
		if _, err := os.Lstat(fs.Path(n)); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", n, err)
		}
	}
	assertContent(t, fs.Path("new/a.jpg"), a)
	assertContent(t, fs.Path("new/b.jpg"), b)
	got := trashed(t, fs)
	if len(got) != 3 || got["photo.jpg.2"] == "" || !strings.HasSuffix(got["photo.jpg"], "/photo.jpg") {
		t.Fatalf("trash holds %v", got)
	}
	for name, orig := range got {
		rel, _ := filepath.Rel(fs.Dir, orig)
		want := map[string][]byte{"x/photo.jpg": a, "y/photo.jpg": a, "x/b/photo.jpg": b}[rel]
		assertContent(t, fs.Path(".Trash-0", "files", name), want)
	}
	for _, n := range []string{"x/photo.jpg", "y/photo.jpg", "x/b/photo.jpg"} {
		if !slices.Contains(rehashed.list(), fs.Path(n)) {
			t.Errorf("the index was not told %s is gone: %v", n, rehashed.list())
		}
	}
	assertNoIntents(t, st)
	info, _ := os.ReadFile(fs.Path(".Trash-0", "info", "photo.jpg.trashinfo"))
	if !strings.HasPrefix(string(info), "[Trash Info]\nPath=") || strings.Contains(string(info), "Path=/") {
		t.Errorf("info file in $topdir is not relative to it:\n%s", info)
	}
}

// TestTrashRefused: a copy another process holds open, and a copy
// written since it was hashed, stay where they are.
func TestTrashRefused(t *testing.T) {
	t.Parallel()
	a, b := content(3, 7000), content(4, 7000)
	fs, st, d := hardlinkSetup(t, map[string][]byte{"k/a": a, "c/a": a, "k/b": b, "c/b": b})
	for _, n := range []string{"k/a", "k/b"} {
		old := time.Now().Add(-time.Hour)
		os.Chtimes(fs.Path(n), old, old)
	}
	recordAll(t, st, fs, "k/a", "c/a", "k/b", "c/b")
	held, err := os.Open(fs.Path("c/a"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	f, _ := os.OpenFile(fs.Path("c/b"), os.O_WRONLY, 0)
	f.WriteAt(b[:10], 0) // the same bytes: only the stat tells
	f.Close()
	k, _ := ParseKeep("oldest")
	_, res, err := runDedup(t, d, Request{PlanOptions: PlanOptions{Mode: Trash, Keep: k}})
	if err != nil || res.Done != 0 || res.Skipped[SkipInUse] != 1 || res.Skipped[SkipChanged] != 1 {
		t.Fatalf("run: %+v, %v", res, err)
	}
	assertContent(t, fs.Path("c/a"), a)
	assertContent(t, fs.Path("c/b"), b)
	if got := trashed(t, fs); len(got) != 0 {
		t.Errorf("trash holds %v", got)
	}
}

// trashSteps are the steps of a move to the trash a child can die after.
var trashSteps = []string{"trash-intent", "trash-info", "trashed"}

// TestTrashKilled kills a trash run right after each step of its first
// move. Before recovery every copy is at its name, or in the trash with
// its info file; after it, no intent and no info file without its file
// is left, and a copy killed before its rename is back as it was.
func TestTrashKilled(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	for run, step := range trashSteps {
		root := fs.Path(fmt.Sprintf("run%d", run))
		files := map[string][]byte{}
		for g := range 3 {
			for c := range 2 {
				files[fmt.Sprintf("d%d/g%d", c, g)] = content(byte(run*8+g), 6000+g*100)
			}
		}
		for name, data := range files {
			writeFile(t, filepath.Join(root, name), data)
		}
		index := filepath.Join(t.TempDir(), "index.db")
		recordClosed(t, index, root, files)
		killChild(t, index, root, step+":1", 0, 0)
		before := len(trashInfos(fs))
		inTrash := nowhereLost(t, fs, root, files)
		withStore(t, index, func(st *store.Store) {
			ins, _ := NewMetaIntents(st).Intents()
			if step != "trash-intent" && len(ins) != 1 {
				t.Errorf("%s: %d intents left, want 1", step, len(ins))
			}
			if err := New(st, Options{Intents: NewMetaIntents(st)}).Recover(context.Background()); err != nil {
				t.Errorf("%s: Recover: %v", step, err)
			}
			assertNoIntents(t, st)
		})
		after := nowhereLost(t, fs, root, files)
		trashed(t, fs) // no info file without its file
		switch step {
		case "trash-info": // killed between the info file and the rename
			if len(inTrash) != 0 || before != 1 || len(after) != 0 {
				t.Errorf("trash-info: %d moved, %d info files before recovery (want 0, 1); %d moved after", len(inTrash), before, len(after))
			}
		case "trashed":
			if len(inTrash) != 1 || len(after) != 1 {
				t.Errorf("trashed: %d moved before recovery, %d after; want 1", len(inTrash), len(after))
			}
		}
	}
}

// nowhereLost checks that each file of files is at its name with its
// bytes or in the trash with its info file, and returns the names in the
// trash.
func nowhereLost(t *testing.T, fs *loopfs.FS, root string, files map[string][]byte) []string {
	t.Helper()
	byPath := map[string]string{}
	for name, orig := range trashList(fs) {
		byPath[orig] = name
	}
	var out []string
	for name, data := range files {
		p := filepath.Join(root, name)
		if _, err := os.Lstat(p); err == nil {
			assertContent(t, p, data)
			continue
		}
		tn, ok := byPath[p]
		if !ok {
			t.Errorf("%s is neither at its name nor in the trash with its info", p)
			continue
		}
		assertContent(t, fs.Path(".Trash-0", "files", tn), data)
		out = append(out, p)
	}
	return out
}

func trashInfos(fs *loopfs.FS) []string {
	infos, _ := filepath.Glob(fs.Path(".Trash-0", "info", "*.trashinfo"))
	return infos
}
