package store

import (
	"bytes"
	"context"
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
