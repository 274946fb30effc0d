package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/annexd/annexd/key"
)

// TestFoldersHandsEveryRecord: Folders hands over every record once,
// under its directory, with its content and state, across chunks (a
// directory larger than a chunk comes in calls one after the other).
func TestFoldersHandsEveryRecord(t *testing.T) {
	s := openTest(t)
	want := map[string]string{} // path → content or state
	var cs []Change
	big := maxFolderFilesPerTx + 10
	for i := range big {
		path := fmt.Sprintf("/r/big/f%05d", i)
		cs = append(cs, Change{Op: OpPut, Path: []byte(path), Record: rec(fmt.Sprint("c", i%7), int64(i%7), 1, uint64(i+10))})
		want[path] = fmt.Sprint("c", i%7)
	}
	for _, d := range []string{"/r/a", "/r/a/b", "/r/z"} {
		cs = append(cs, Change{Op: OpPut, Path: []byte(d + "/x"), Record: rec("x", 3, 1, uint64(len(cs)+big))})
		want[d+"/x"] = "x"
	}
	pend := Record{Size: 9, Dev: 1, Ino: 99999, State: StatePending}
	cs = append(cs, Change{Op: OpPut, Path: []byte("/r/a/p"), Record: pend})
	want["/r/a/p"] = "pending"
	if err := s.SubmitAll(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var lastDir []byte
	calls := 0
	err := s.Folders(context.Background(), func(dir []byte, files []FolderFile) error {
		calls++
		if bytes.Equal(dir, lastDir) && string(dir) != "/r/big/" {
			t.Errorf("directory %s handed over twice", dir)
		}
		lastDir = bytes.Clone(dir)
		for i, f := range files {
			name := fmt.Sprintf("%sn%d-%d", dir, calls, i)
			if !f.Keyed() {
				got[name] = f.State.String()
				continue
			}
			if f.Backend != key.SHA256 {
				t.Errorf("%s: backend %s, want the base SHA256", name, f.Backend)
			}
			got[name] = contentOf(t, f.Digest)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls < 5 {
		t.Errorf("%d calls: the big directory was not split over chunks", calls)
	}
	if countBy(got) != countBy(want) {
		t.Errorf("handed over %s\nwant %s", countBy(got), countBy(want))
	}
}

// contentOf names the content seed whose digest d is (rec's contents).
func contentOf(t *testing.T, d []byte) string {
	for i := range 7 {
		if r := rec(fmt.Sprint("c", i), 0, 0, 0); bytes.Equal(r.Digest, d) {
			return fmt.Sprint("c", i)
		}
	}
	if r := rec("x", 0, 0, 0); bytes.Equal(r.Digest, d) {
		return "x"
	}
	t.Errorf("digest %x of no content", d)
	return "?"
}

// countBy sums up m as how many paths of each directory hold each value.
func countBy(m map[string]string) string {
	n := map[string]int{}
	for p, v := range m {
		dir := p[:bytes.LastIndexByte([]byte(p), '/')+1]
		n[dir+" "+v]++
	}
	return fmt.Sprint(n)
}

// TestFoldersStops: ErrStop from fn ends Folders with nil, another error
// is returned, both at once, and a cancelled context ends it with the
// context's error: the reader ahead of fn is stopped each time.
func TestFoldersStops(t *testing.T) {
	s := openTest(t)
	var cs []Change
	for i := range 3 * maxFolderFilesPerTx {
		cs = append(cs, Change{Op: OpPut, Path: fmt.Appendf(nil, "/r/d%d/f%d", i/100, i), Record: rec(fmt.Sprint(i), 1, 1, uint64(i+1))})
	}
	if err := s.SubmitAll(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	bad := errors.New("bad")
	for _, c := range []struct {
		give, want error
	}{{ErrStop, nil}, {bad, bad}} {
		calls := 0
		err := s.Folders(context.Background(), func([]byte, []FolderFile) error { calls++; return c.give })
		if !errors.Is(err, c.want) || err != nil && c.want == nil || calls != 1 {
			t.Errorf("fn returning %v: Folders %v after %d calls, want %v after 1", c.give, err, calls, c.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := s.Folders(ctx, func([]byte, []FolderFile) error {
		if calls++; calls == 1 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || calls > 100+maxFolderFilesPerTx/100 {
		t.Errorf("cancelled: Folders %v after %d calls, want context.Canceled within two chunks", err, calls)
	}
}
