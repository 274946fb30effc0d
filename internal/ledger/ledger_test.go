package ledger

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// clock is a settable time source for a Ledger.
type clock struct{ t int64 }

func (c *clock) now() int64               { return c.t }
func (c *clock) add(d time.Duration)      { c.t += int64(d) }
func (c *clock) at(d time.Duration) int64 { return t0 + int64(d) }

const t0 = int64(1_700_000_000) * int64(time.Second)

func newTest(max int) (*Ledger, *clock) {
	c := &clock{t: t0}
	return newLedger(c.now, max), c
}

// op changes a ledger at a time relative to t0.
type op struct {
	at   time.Duration
	do   string // written, doubted, arrived, renamed, lost, moved
	path string
	ino  uint64
}

func apply(l *Ledger, c *clock, ops []op) {
	for _, o := range ops {
		c.t = c.at(o.at)
		switch o.do {
		case "written":
			l.Written(o.path, 1, o.ino)
		case "renamed":
			l.DirRenamed(o.path)
		case "lost":
			l.Lost(o.path)
		case "doubted":
			l.Doubted(o.path)
		case "arrived": // ino 0: a directory
			l.Arrived(o.path, 1, o.ino)
		case "moved": // path is "from>to"
			from, to, _ := strings.Cut(o.path, ">")
			l.DirMoved(from, to)
		}
	}
}

// TestSince covers the three answers: a write seen to the path or the
// inode, a doubt scoped to the files it may cover, and nothing.
func TestSince(t *testing.T) {
	s := time.Second
	const (
		no     = NotWritten
		unsure = Unsure
		yes    = Written
	)
	for _, c := range []struct {
		name  string
		ops   []op
		now   time.Duration // when asked
		path  string
		ino   uint64
		since time.Duration
		want  Answer
	}{
		{"nothing recorded", nil, s, "/r/f", 7, 0, no},
		{"written after the record", []op{{2 * s, "written", "/r/f", 7}}, 3 * s, "/r/f", 0, s, yes},
		{"written at the record's time", []op{{s, "written", "/r/f", 7}}, 3 * s, "/r/f", 0, s, yes},
		{"written before the record", []op{{s, "written", "/r/f", 7}}, 3 * s, "/r/f", 0, 2 * s, no},
		{"latest write counts", []op{{s, "written", "/r/f", 7}, {5 * s, "written", "/r/f", 7}}, 6 * s, "/r/f", 0, 2 * s, yes},
		{"by inode under another name", []op{{2 * s, "written", "/r/f", 7}}, 3 * s, "/r/g", 7, s, yes},
		{"another inode", []op{{2 * s, "written", "/r/f", 7}}, 3 * s, "/r/g", 8, s, no},
		{"inode 0 is not looked up", []op{{2 * s, "written", "/r/f", 7}}, 3 * s, "/r/g", 0, s, no},
		{"another path", []op{{2 * s, "written", "/r/f", 7}}, 3 * s, "/r/f2", 0, s, no},
		{"its path, written as another inode", []op{{2 * s, "written", "/r/f", 7}}, 3 * s, "/r/f", 8, s, no},
		{"its path, written as it and another inode", []op{{2 * s, "written", "/r/f", 8}, {3 * s, "written", "/r/f", 7}},
			4 * s, "/r/f", 8, s, yes},
		{"its path, written as two other inodes", []op{{2 * s, "written", "/r/f", 6}, {3 * s, "written", "/r/f", 7}},
			4 * s, "/r/f", 8, s, unsure},
		{"its path, two other inodes, asked by path", []op{{2 * s, "written", "/r/f", 6}, {3 * s, "written", "/r/f", 7}},
			4 * s, "/r/f", 0, s, yes},
		{"its path, two other inodes before the record", []op{{2 * s, "written", "/r/f", 6}, {3 * s, "written", "/r/f", 7}},
			4 * s, "/r/f", 8, 3*s + 1, no},
		{"its path, unknown then another inode", []op{{2 * s, "written", "/r/f", 0}, {3 * s, "written", "/r/f", 7}},
			4 * s, "/r/f", 8, s, yes},
		{"its path, another inode then unknown", []op{{2 * s, "written", "/r/f", 7}, {3 * s, "written", "/r/f", 0}},
			4 * s, "/r/f", 8, s, yes},
		{"its path, two other inodes then unknown", []op{{2 * s, "written", "/r/f", 6}, {3 * s, "written", "/r/f", 7},
			{3 * s, "written", "/r/f", 0}}, 4 * s, "/r/f", 8, s, yes},
		{"expired after the window", []op{{2 * s, "written", "/r/f", 7}}, 2*s + time.Hour + 1, "/r/f", 7, s, no},
		{"alive at the window's end", []op{{2 * s, "written", "/r/f", 7}}, 2*s + time.Hour, "/r/f", 7, s, yes},

		{"unknown inode: its path is written", []op{{2 * s, "written", "/r/d/f", 0}}, 3 * s, "/r/d/f", 0, s, yes},
		{"unknown inode: its path for the hour", []op{{2 * s, "written", "/r/d/f", 0}}, 2*s + 30*time.Minute, "/r/d/f", 0, s, yes},
		{"unknown inode: a file beside it is unsure", []op{{2 * s, "written", "/r/d/t", 0}}, 3 * s, "/r/d/f", 9, s, unsure},
		{"unknown inode: not a file elsewhere", []op{{2 * s, "written", "/r/other/t", 0}}, 3 * s, "/r/d/f", 9, s, no},
		{"unknown inode: not a file below", []op{{2 * s, "written", "/r/d/t", 0}}, 3 * s, "/r/d/e/f", 9, s, no},
		{"unknown inode: not the directory above", []op{{2 * s, "written", "/r/d/t", 0}}, 3 * s, "/r/f", 9, s, no},
		{"unknown inode: older records only", []op{{2 * s, "written", "/r/d/t", 0}}, 3 * s, "/r/d/f", 9, 2*s + 1, no},
		{"unknown inode: ten minutes", []op{{2 * s, "written", "/r/d/t", 0}}, 2*s + 10*time.Minute + 1, "/r/d/f", 9, s, no},
		{"unknown inode beside, written by inode", []op{{2 * s, "written", "/r/d/t", 0}, {2 * s, "written", "/r/x", 9}},
			3 * s, "/r/d/f", 9, s, yes},

		{"unknown inode, then another file came", []op{{2 * s, "written", "/r/d/f", 0}, {3 * s, "arrived", "/r/d/f", 9}},
			4 * s, "/r/d/f", 9, s, unsure},
		{"unknown inode, another file came: the file that left", []op{{2 * s, "written", "/r/d/f", 0}, {3 * s, "arrived", "/r/d/f", 9}},
			4 * s, "/r/d/f", 8, s, yes},
		{"unknown inode, another file came: asked by path", []op{{2 * s, "written", "/r/d/f", 0}, {3 * s, "arrived", "/r/d/f", 9}},
			4 * s, "/r/d/f", 0, s, yes},
		{"a file came, then a write of unknown inode", []op{{2 * s, "written", "/r/d/f", 0}, {3 * s, "arrived", "/r/d/f", 9},
			{4 * s, "written", "/r/d/f", 0}}, 5 * s, "/r/d/f", 9, s, yes},
		{"unknown inode, then a directory came above it", []op{{2 * s, "written", "/r/d/e/f", 0}, {3 * s, "arrived", "/r/d", 0}},
			4 * s, "/r/d/e/f", 9, s, unsure},
		{"unknown inode, a directory came beside it", []op{{2 * s, "written", "/r/d/e/f", 0}, {3 * s, "arrived", "/r/dd", 0}},
			4 * s, "/r/d/e/f", 9, s, yes},
		{"a file came where no write was lost", []op{{2 * s, "written", "/r/d/f", 8}, {3 * s, "arrived", "/r/d/f", 9}},
			4 * s, "/r/d/f", 9, s, no},
		{"doubted: the file at its path", []op{{2 * s, "doubted", "/r/d/f", 0}}, 3 * s, "/r/d/f", 9, s, unsure},
		{"doubted: asked by path", []op{{2 * s, "doubted", "/r/d/f", 0}}, 3 * s, "/r/d/f", 0, s, unsure},
		{"doubted: for the hour", []op{{2 * s, "doubted", "/r/d/f", 0}}, 2*s + time.Hour, "/r/d/f", 9, s, unsure},
		{"doubted: forgotten after the hour", []op{{2 * s, "doubted", "/r/d/f", 0}}, 2*s + time.Hour + 1, "/r/d/f", 9, s, no},
		{"doubted: not a file beside it", []op{{2 * s, "doubted", "/r/d/t", 0}}, 3 * s, "/r/d/f", 9, s, no},
		{"doubted: newer records are fine", []op{{2 * s, "doubted", "/r/d/f", 0}}, 3 * s, "/r/d/f", 9, 2*s + 1, no},
		{"doubted, and written by inode", []op{{2 * s, "doubted", "/r/d/f", 0}, {2 * s, "written", "/r/x", 9}},
			3 * s, "/r/d/f", 9, s, yes},
		{"doubted under a moved directory's old name", []op{{2 * s, "moved", "/r/d>/r/d2", 0}, {3 * s, "doubted", "/r/d/f", 0}},
			4 * s, "/r/d2/f", 9, s, unsure},

		{"lost: a file under the root", []op{{2 * s, "lost", "/r", 0}}, 30 * time.Minute, "/r/a/b/f", 3, s, unsure},
		{"lost: a file under another root", []op{{2 * s, "lost", "/r", 0}}, 3 * s, "/s/f", 3, s, no},
		{"lost: a root that is a prefix", []op{{2 * s, "lost", "/r", 0}}, 3 * s, "/rr/f", 3, s, no},
		{"lost: newer records are fine", []op{{2 * s, "lost", "/r", 0}}, 3 * s, "/r/f", 3, 2*s + 1, no},
		{"lost: forgotten after the window", []op{{2 * s, "lost", "/r", 0}}, 2*s + time.Hour + 1, "/r/f", 3, s, no},
		{"lost at /: every file", []op{{2 * s, "lost", "/", 0}}, 3 * s, "/s/f", 3, s, unsure},

		{"under a renamed directory", []op{{2 * s, "renamed", "/r/d", 0}}, 3 * s, "/r/d/a/f", 0, s, unsure},
		{"directly under a renamed directory", []op{{2 * s, "renamed", "/r/d", 0}}, time.Minute, "/r/d/f", 0, s, unsure},
		{"under a renamed directory, written", []op{{2 * s, "renamed", "/r/d", 0}, {2 * s, "written", "/r/d/f", 4}},
			time.Minute, "/r/d/f", 0, s, yes},
		{"hashed after the directory's rename", []op{{2 * s, "renamed", "/r/d", 0}}, 3 * s, "/r/d/a/f", 0, 3 * s, no},
		{"beside a renamed directory", []op{{2 * s, "renamed", "/r/d", 0}}, 3 * s, "/r/dd/f", 0, s, no},
		{"elsewhere", []op{{2 * s, "renamed", "/r/d", 0}}, 3 * s, "/r/e/f", 0, s, no},
		{"renamed directory expires", []op{{2 * s, "renamed", "/r/d", 0}}, 2*s + time.Hour + 1, "/r/d/f", 0, s, no},
		{"renamed root", []op{{2 * s, "renamed", "/", 0}}, 3 * s, "/f", 0, s, unsure},

		{"written under the old name after the move", []op{{2 * s, "renamed", "/r/d", 0}, {2 * s, "moved", "/r/d>/r/d2", 0},
			{3 * s, "written", "/r/d/a/f", 0}}, 4 * s, "/r/d2/a/f", 9, s, yes},
		{"written under the old name before the move", []op{{2 * s, "written", "/r/d/a/f", 0}, {3 * s, "renamed", "/r/d", 0},
			{3 * s, "moved", "/r/d>/r/d2", 0}}, 4 * s, "/r/d2/a/f", 9, s, yes},
		{"written under the old name, another inode", []op{{2 * s, "moved", "/r/d>/r/d2", 0},
			{3 * s, "written", "/r/d/a/f", 8}}, 4 * s, "/r/d2/a/f", 9, s, no},
		{"written under the old name long after the move: another file", []op{{2 * s, "moved", "/r/d>/r/d2", 0},
			{2*s + 2*time.Minute, "written", "/r/d/a/f", 0}}, 3 * time.Minute, "/r/d2/a/f", 9, s, no},
		{"written under the old name before the record", []op{{2 * s, "moved", "/r/d>/r/d2", 0},
			{3 * s, "written", "/r/d/a/f", 0}}, 4 * s, "/r/d2/a/f", 9, 4 * s, no},
		{"a file beside the moved directory", []op{{2 * s, "moved", "/r/d>/r/d2", 0},
			{3 * s, "written", "/r/d/a/f", 0}}, 4 * s, "/r/d22/a/f", 9, s, no},
		{"written under the first of two old names", []op{{2 * s, "moved", "/r/d>/r/d2", 0}, {3 * s, "moved", "/r/d2>/r/d3", 0},
			{4 * s, "written", "/r/d/a/f", 0}}, 5 * s, "/r/d3/a/f", 9, s, yes},
		{"moved back: the old name's write", []op{{2 * s, "moved", "/r/d>/r/d2", 0}, {3 * s, "moved", "/r/d2>/r/d", 0},
			{4 * s, "written", "/r/d2/f", 0}}, 5 * s, "/r/d/f", 9, s, yes},
		{"a doubt under the old name", []op{{2 * s, "moved", "/r/d>/r/d2", 0}, {3 * s, "written", "/r/d/a/t", 0}},
			4 * s, "/r/d2/a/f", 9, s, unsure},
		{"moved root", []op{{2 * s, "moved", "/>/x", 0}, {3 * s, "written", "/a/f", 0}}, 4 * s, "/x/a/f", 9, s, yes},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, clk := newTest(maxEntries)
			apply(l, clk, c.ops)
			clk.t = clk.at(c.now)
			got := l.Since(c.path, 1, c.ino, clk.at(c.since))
			if got != c.want {
				t.Errorf("Since(%s, ino %d, since %v) at %v = %v, want %v", c.path, c.ino, c.since, c.now, got, c.want)
			}
			if w := l.WrittenSince(c.path, 1, c.ino, clk.at(c.since)); w != (c.want != NotWritten) {
				t.Errorf("WrittenSince = %v with Since %v", w, got)
			}
		})
	}
}

// TestSinceNames asks about a file by the names of its inode: a write
// seen at any of them, of unknown inode or of this one, is the file's; a
// write of another inode at one of them is not.
func TestSinceNames(t *testing.T) {
	s := time.Second
	names := []string{"/r/a/f", "/r/b/l", "/r/c/m"}
	for _, c := range []struct {
		name string
		ops  []op
		want Answer
	}{
		{"nothing", nil, NotWritten},
		{"a link written, inode unknown", []op{{2 * s, "written", "/r/b/l", 0}}, Written},
		{"a link written under a moved directory's old name", []op{{2 * s, "written", "/r/x/l", 0},
			{3 * s, "moved", "/r/x>/r/b", 0}}, Written},
		{"a link written, this inode", []op{{2 * s, "written", "/r/c/m", 7}}, Written},
		{"a link's path written as another inode", []op{{2 * s, "written", "/r/b/l", 8}}, NotWritten},
		{"a link's write before the record", []op{{s / 2, "written", "/r/b/l", 0}}, NotWritten},
		{"a doubt beside a link", []op{{2 * s, "written", "/r/b/tmp", 0}}, Unsure},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, clk := newTest(maxEntries)
			apply(l, clk, c.ops)
			clk.t = clk.at(4 * s)
			if got := SinceNames(l, names, 1, 7, clk.at(s)); got != c.want {
				t.Errorf("SinceNames = %v, want %v", got, c.want)
			}
		})
	}
}

// A full map drops its older half; records hashed before the newest
// dropped entry then count as written, later ones do not.
func TestFullDropsOlderHalf(t *testing.T) {
	l, c := newTest(8)
	for i := range 8 {
		c.t = c.at(time.Duration(i+1) * time.Second)
		l.Written(fmt.Sprint("/r/f", i), 1, uint64(i+1))
	}
	c.t = c.at(10 * time.Second)
	l.Written("/r/new", 1, 100)
	if n := len(l.paths); n != 5 {
		t.Errorf("%d paths after the drop, want 5 (the newer half and the new one)", n)
	}
	for _, q := range []struct {
		since time.Duration
		want  Answer
	}{{time.Second, Unsure}, {4 * time.Second, Unsure}, {4*time.Second + 1, NotWritten}} {
		if got := l.Since("/s/unrelated", 1, 0, c.at(q.since)); got != q.want {
			t.Errorf("after the drop, a record hashed at %v: %v, want %v", q.since, got, q.want)
		}
	}
	if l.Since("/r/f7", 1, 0, c.at(7*time.Second)) != Written {
		t.Error("a kept entry was lost")
	}
}

// Expired entries are pruned before anything is dropped, and by age alone
// after a quarter window.
func TestPruneByAge(t *testing.T) {
	l, c := newTest(4)
	for i := range 4 {
		l.Written(fmt.Sprint("/r/f", i), 1, uint64(i+1))
	}
	c.add(time.Hour + time.Second)
	l.Written("/r/late", 1, 99)
	if len(l.paths) != 1 || len(l.inodes) != 1 || l.lostAt != 0 {
		t.Errorf("expired entries not pruned first: %d paths, %d inodes, lost at %d", len(l.paths), len(l.inodes), l.lostAt)
	}
	l2, c2 := newTest(maxEntries)
	l2.Written("/r/a", 1, 1)
	l2.DirRenamed("/r/d")
	l2.Written("/r/u", 1, 0)
	l2.Lost("/r")
	c2.add(time.Hour + time.Second)
	l2.Lost("/s")
	if len(l2.paths)+len(l2.inodes)+len(l2.dirs)+len(l2.unknown) != 0 || len(l2.lost) != 1 {
		t.Errorf("expired entries kept: %d paths, %d inodes, %d dirs, %d unknown, %d lost",
			len(l2.paths), len(l2.inodes), len(l2.dirs), len(l2.unknown), len(l2.lost))
	}
}

// A clock that steps back keeps the later time of an entry.
func TestClockBackKeepsLaterTime(t *testing.T) {
	l, c := newTest(maxEntries)
	c.t = c.at(10 * time.Second)
	l.Written("/r/f", 1, 5)
	c.t = c.at(5 * time.Second)
	l.Written("/r/f", 1, 5)
	if l.Since("/r/f", 1, 5, c.at(8*time.Second)) != Written {
		t.Error("the earlier time replaced the later one")
	}
}

// checkNeverMissed replays ops (from a fuzzer or a random source) on a
// small ledger and checks, after each, that every write recorded within
// the window at or after a record's time answers Written, by path and by
// inode (or Unsure once pruning dropped it), and that every directory
// rename and loss leaves the files under it at least Unsure.
func checkNeverMissed(t *testing.T, b []byte) {
	l, c := newTest(4)
	type entry struct {
		path string
		ino  uint64
		at   int64
		dir  bool
	}
	var seen []entry
	b = b[:min(len(b), 3*300)] // each step checks every earlier one
	for len(b) >= 3 {
		kind, arg, step := b[0]%8, b[1], b[2]
		b = b[3:]
		// Steps from nothing to about 35 minutes, so some entries expire.
		c.add(time.Duration(step) * time.Duration(step) * 32 * time.Millisecond)
		path := fmt.Sprintf("/r/%d/f%d", arg%4, arg%16)
		switch kind {
		case 0, 1, 2, 3:
			ino := uint64(arg % 12) // 0: unknown
			l.Written(path, 1, ino)
			seen = append(seen, entry{path: path, ino: ino, at: c.now()})
		case 4, 5:
			dir := fmt.Sprintf("/r/%d", arg%6)
			l.DirRenamed(dir)
			seen = append(seen, entry{path: dir, at: c.now(), dir: true})
		case 6:
			dir := fmt.Sprintf("/r/%d", arg%6)
			l.Lost(dir)
			seen = append(seen, entry{path: dir, at: c.now(), dir: true})
		case 7:
			c.add(time.Duration(arg) * time.Minute / 4)
		}
		for _, e := range seen {
			if c.now()-e.at > window {
				continue
			}
			// Pruning may have turned a write into a doubt over every file.
			pruned := l.lostAt >= e.at
			for _, since := range []int64{e.at, e.at - 1, e.at - int64(time.Minute)} {
				switch {
				case e.dir:
					if l.Since(e.path+"/x/f", 1, 0, since) == NotWritten {
						t.Fatalf("a file under %s, renamed or lost %v ago, missed for a record %v older", e.path, time.Duration(c.now()-e.at), time.Duration(e.at-since))
					}
				default:
					if a := l.Since(e.path, 1, 0, since); a != Written && (!pruned || a != Unsure) {
						t.Fatalf("%s written %v ago: %v by path", e.path, time.Duration(c.now()-e.at), a)
					}
					if a := l.Since("/elsewhere", 1, e.ino, since); e.ino != 0 && a != Written && (!pruned || a != Unsure) {
						t.Fatalf("inode %d written %v ago: %v", e.ino, time.Duration(c.now()-e.at), a)
					}
				}
			}
		}
	}
}

func TestNeverMissed(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		b := make([]byte, 3*300)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		checkNeverMissed(t, b)
	}
}

func FuzzNeverMissed(f *testing.F) {
	f.Add([]byte{0, 1, 0, 4, 1, 9, 0, 2, 3, 6, 0, 1, 1, 2, 200})
	f.Add([]byte{0, 0, 255, 0, 1, 255, 0, 2, 255, 0, 3, 255, 0, 4, 255, 7, 255, 0})
	f.Fuzz(func(t *testing.T, b []byte) { checkNeverMissed(t, b) })
}

// A write seen after the clock stepped back is after every record hashed
// before the step, though its time is earlier (date -s, a clock put
// right); a write before a record hashed after the step is not.
func TestClockStepBack(t *testing.T) {
	l, c := newTest(maxEntries)
	c.t = c.at(time.Hour)
	hashed := c.now() // a record hashed before the step
	l.Written("/r/other", 1, 9)
	c.add(time.Minute)
	c.t -= int64(24 * time.Hour) // the clock is set back a day
	l.Written("/r/f", 1, 5)
	if a := l.Since("/r/f", 1, 5, hashed); a != Written {
		t.Errorf("a write after the step back, by path and inode: %v; want written", a)
	}
	if a := l.Since("/r/g", 1, 5, hashed); a != Written {
		t.Errorf("a write after the step back, by inode: %v; want written", a)
	}
	if a := l.Since("/r/other", 1, 9, hashed); a != Written {
		t.Errorf("a write before the step, after the hash: %v; want written", a)
	}
	c.add(time.Second)
	rehashed := c.now() // hashed again after the write, after the step
	c.add(time.Second)
	if a := l.Since("/r/f", 1, 5, rehashed); a != NotWritten {
		t.Errorf("a write after the step and before the hash: %v; want not written", a)
	}
	l.Written("/r/f", 1, 5)
	if a := l.Since("/r/f", 1, 5, rehashed); a != Written {
		t.Errorf("a write after the hash after the step: %v; want written", a)
	}
}

// A record hashed before the ledger began at a time the clock has not
// reached (set back while the daemon was down) is older than every entry.
func TestClockSetBackBeforeStart(t *testing.T) {
	l, c := newTest(maxEntries)
	hashed := c.at(24 * time.Hour) // by the last run, before the clock was set back
	c.add(time.Minute)
	l.Written("/r/f", 1, 5)
	if a := l.Since("/r/f", 1, 5, hashed); a != Written {
		t.Errorf("a write by this run, of a record hashed by the last before the clock was set back: %v; want written", a)
	}
}
