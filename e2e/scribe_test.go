package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// scribe appends numbered lines to files through their names, as users
// do while deduplication runs, and remembers which name each line went
// through. verify then finds out whether any line was lost or moved to
// another file.
type scribe struct {
	n       atomic.Int64
	mu      sync.Mutex
	written map[string][]string // name → lines appended through it
}

func newScribe() *scribe { return &scribe{written: map[string][]string{}} }

// appendLine appends one new line to the file at path; a line is counted
// only when the write and the close succeeded.
func (s *scribe) appendLine(path string) error {
	line := fmt.Sprintf("<line %09d>\n", s.n.Add(1))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.written[path] = append(s.written[path], line)
	s.mu.Unlock()
	return nil
}

// lines is how many lines were appended.
func (s *scribe) lines() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ls := range s.written {
		n += len(ls)
	}
	return n
}

// audit is what verify found.
type audit struct {
	lost      int      // lines written through a name, in no file now
	misplaced int      // lines in a file that none of its names was written through
	keptAside int      // lines in an old copy kept beside its name
	kept      []string // those old copies
	broken    []string // names whose bytes do not start with their original bytes
	lostLines []string // name: line, of each line lost
}

func (a audit) String() string {
	return fmt.Sprintf("lost %d %v, misplaced %d, kept aside %d (%d files), broken %v", a.lost, a.lostLines, a.misplaced, a.keptAside, len(a.kept), a.broken)
}

// verify reads every name (original bytes in data, by name) and every old
// copy kept under root, groups the names by inode, and checks that each
// line written through a name is in the file that name shows now, and
// that each file holds only lines written through one of its names.
func (s *scribe) verify(t *testing.T, root string, data map[string][]byte) audit {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var a audit
	byIno := map[uint64]map[string]bool{} // inode → lines in it
	namesOf := map[uint64][]string{}
	inoOf := map[string]uint64{}
	everywhere := map[string]bool{}
	for name, orig := range data {
		var st unix.Stat_t
		if err := unix.Lstat(name, &st); err != nil {
			a.broken = append(a.broken, name)
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil || !bytes.HasPrefix(b, orig) {
			a.broken = append(a.broken, name)
			continue
		}
		inoOf[name] = st.Ino
		namesOf[st.Ino] = append(namesOf[st.Ino], name)
		if byIno[st.Ino] == nil {
			byIno[st.Ino] = linesOf(b[len(orig):])
			for l := range byIno[st.Ino] {
				everywhere[l] = true
			}
		}
	}
	keptLines := map[string]bool{}
	filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err != nil || !strings.Contains(e.Name(), ".annexd-kept-") {
			return nil
		}
		a.kept = append(a.kept, p)
		orig := data[p[:strings.Index(p, ".annexd-kept-")]]
		if b, err := os.ReadFile(p); err == nil && bytes.HasPrefix(b, orig) {
			for l := range linesOf(b[len(orig):]) {
				keptLines[l] = true
			}
		} else {
			a.broken = append(a.broken, p)
		}
		return nil
	})
	for name, lines := range s.written {
		for _, l := range lines {
			switch {
			case byIno[inoOf[name]][l]:
			case keptLines[l]:
				a.keptAside++
			default:
				a.lost++
				a.lostLines = append(a.lostLines, name+": "+strings.TrimSpace(l))
			}
		}
	}
	for ino, lines := range byIno {
		via := map[string]bool{}
		for _, n := range namesOf[ino] {
			for _, l := range s.written[n] {
				via[l] = true
			}
		}
		for l := range lines {
			if !via[l] {
				a.misplaced++
			}
		}
	}
	return a
}

// linesOf returns the scribe's lines in b: whatever follows a file's
// original bytes.
func linesOf(b []byte) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if strings.HasPrefix(l, "<line ") {
			out[l] = true
		}
	}
	return out
}

// tempNames lists hardlink deduplication's temporary names under root.
func tempNames(root string) []string {
	var out []string
	filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(e.Name(), ".annexd-dedup-") {
			out = append(out, p)
		}
		return nil
	})
	return out
}
