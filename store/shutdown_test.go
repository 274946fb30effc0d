package store

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/key"
)

func TestRunMarkerRoundTrip(t *testing.T) {
	r := Run{
		Started: time.Unix(0, 1_700_000_000_000_000_000), LastCommit: time.Unix(0, 1_700_000_100_000_000_000),
		Clean: true, BootID: "5b3e9a1c-0000-4000-8000-000000000001", Window: 65 * time.Second,
		Suspect: []Span{{1, 2}, {10, 20}},
	}
	got, err := decodeRun(r.encode())
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", r, got, err)
	}
	b := r.encode()
	for _, bad := range [][]byte{nil, {9, 0}, {runMarkerV1, 2}, b[:len(b)-1], append(b, 0)} {
		if _, err := decodeRun(bad); err == nil {
			t.Errorf("decodeRun(%x) did not fail", bad)
		}
	}
}

func TestSuspectAfter(t *testing.T) {
	const w = 60 * time.Second
	last := time.Unix(0, 1000*int64(time.Second))
	span := Span{From: last.UnixNano() - int64(w), To: last.UnixNano()}
	old := Span{From: 1, To: 2}
	cases := []struct {
		name string
		prev Run
		boot string
		kept bool // its mounts kept their writes
		want []Span
	}{
		{"clean, same boot", Run{Clean: true, BootID: "a", LastCommit: last, Window: w}, "a", false, nil},
		{"clean, same boot, old spans kept", Run{Clean: true, BootID: "a", LastCommit: last, Window: w, Suspect: []Span{old}}, "a", false, []Span{old}},
		{"unclean", Run{BootID: "a", LastCommit: last, Window: w}, "a", false, []Span{span}},
		{"unclean, its mounts kept their writes", Run{BootID: "a", LastCommit: last, Window: w}, "a", true, nil},
		{"unclean, kept, old spans kept", Run{BootID: "a", LastCommit: last, Window: w, Suspect: []Span{old}}, "a", true, []Span{old}},
		{"unclean, then the machine restarted", Run{BootID: "a", LastCommit: last, Window: w}, "b", true, []Span{span}},
		{"clean, then the machine restarted", Run{Clean: true, BootID: "a", LastCommit: last, Window: w}, "b", false, []Span{span}},
		{"clean, boot unknown", Run{Clean: true, LastCommit: last, Window: w}, "", false, []Span{span}},
		{"unclean, boot unknown", Run{LastCommit: last, Window: w}, "", true, []Span{span}},
		{"unclean, old spans kept", Run{LastCommit: last, Window: w, Suspect: []Span{old}}, "a", false, []Span{old, span}},
	}
	for _, c := range cases {
		if got := suspectAfter(c.prev, c.boot, c.kept); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestMergeSpans(t *testing.T) {
	if got, want := mergeSpans([]Span{{5, 9}, {1, 3}, {2, 4}, {9, 10}}), []Span{{1, 4}, {5, 10}}; !reflect.DeepEqual(got, want) {
		t.Errorf("overlapping: %v, want %v", got, want)
	}
	var many []Span
	for i := range maxSuspect + 3 {
		many = append(many, Span{int64(i * 100), int64(i*100 + 10)})
	}
	many[4] = Span{400, 495} // the closest to its successor
	got := mergeSpans(many)
	if len(got) != maxSuspect {
		t.Fatalf("%d spans after merging %d, want %d", len(got), len(many), maxSuspect)
	}
	for _, s := range many {
		covered := false
		for _, g := range got {
			covered = covered || (g.From <= s.From && s.To <= g.To)
		}
		if !covered {
			t.Errorf("span %v is no longer covered by %v", s, got)
		}
	}
}

func TestTrusted(t *testing.T) {
	suspect := []Span{{100, 200}, {500, 600}}
	cases := []struct {
		rec  Record
		want bool
	}{
		{Record{State: StateOK, HashedAt: 50}, true},
		{Record{State: StateOK, HashedAt: 100}, false},
		{Record{State: StateOK, HashedAt: 200}, false},
		{Record{State: StateOK, HashedAt: 300}, true},
		{Record{State: StateOK, HashedAt: 550}, false},
		{Record{State: StateUnreadable, HashedAt: 150}, true}, // no key to doubt
		{Record{State: StateOK, HashedAt: 150}, true},         // with no spans below
	}
	for i, c := range cases {
		spans := suspect
		if i == len(cases)-1 {
			spans = nil
		}
		if got := Trusted(&c.rec, spans); got != c.want {
			t.Errorf("Trusted(%+v, %v) = %v, want %v", c.rec, spans, got, c.want)
		}
	}
}

// A writer that closes the index leaves a clean marker and nothing
// suspect; one that stops without closing (its process killed) makes the
// records it hashed within the data window before its last commit
// suspect at the next open, and they stay so through later clean runs.
func TestRunMarkerAcrossOpens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	opts := Options{DataWindow: time.Minute}
	s, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.PreviousRun(); ok || s.Suspect() != nil {
		t.Fatalf("a new index: previous run %v, suspect %v", ok, s.Suspect())
	}
	stop := runWriter(t, s)
	hashed := time.Now().UnixNano()
	r := rec("a", 1, 1, 1)
	r.HashedAt = hashed
	if err := s.Put(context.Background(), []byte("/t/a"), r); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = reopen(t, path, opts)
	if prev, ok := s.PreviousRun(); !ok || !prev.Clean || len(s.Suspect()) != 0 {
		t.Fatalf("after a clean close: previous run %+v (%v), suspect %v", prev, ok, s.Suspect())
	}
	// The writer stops without closing, as a killed process does.
	stop = runWriter(t, s)
	if err := s.Put(context.Background(), []byte("/t/b"), r); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := s.db.Close(); err != nil {
		t.Fatal(err)
	}

	s = reopen(t, path, opts)
	prev, ok := s.PreviousRun()
	if !ok || prev.Clean || prev.LastCommit.UnixNano() < hashed {
		t.Fatalf("after a run left without closing: %+v (%v)", prev, ok)
	}
	want := []Span{{prev.LastCommit.UnixNano() - int64(time.Minute), prev.LastCommit.UnixNano()}}
	if !reflect.DeepEqual(s.Suspect(), want) || Trusted(&r, s.Suspect()) {
		t.Fatalf("suspect %v, want %v; record hashed at %d trusted: %v", s.Suspect(), want, hashed, Trusted(&r, s.Suspect()))
	}
	older := r
	older.HashedAt = want[0].From - 1
	if !Trusted(&older, s.Suspect()) {
		t.Errorf("a record hashed before the window is not trusted")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, path, opts)
	if !reflect.DeepEqual(s.Suspect(), want) {
		t.Errorf("after a clean run that followed: suspect %v, want %v kept", s.Suspect(), want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// A writer killed mid-stream leaves an unclean marker whose last commit
// is no older than its last acknowledged change. Its records were all
// hashed long before (the plan's), so nothing is suspect.
func TestKilledWriterLeavesUncleanMarker(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	before := time.Now()
	runAndKill(t, path, 1, 50*time.Millisecond, false)
	s := reopen(t, path, Options{})
	defer s.Close()
	prev, ok := s.PreviousRun()
	if !ok || prev.Clean || prev.LastCommit.Before(before) || prev.LastCommit.After(time.Now()) {
		t.Fatalf("after SIGKILL: previous run %+v (%v), want unclean with its last commit since %v", prev, ok, before)
	}
	if len(s.Suspect()) != 0 {
		t.Errorf("suspect %v; no record was hashed within the window", s.Suspect())
	}
}

// check-db's read-only open and Compact begin no run: the marker a killed
// writer left, and its mounts list, are still there for the daemon that
// opens the index next. Its records on the test's own file system, which
// stays mounted, are not suspect; a record on a file system the kernel
// names no mount of (a made-up one) makes the window suspect.
func TestReadOnlyAndCompactKeepTheMarker(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "index.db")
	fi, err := fsstat.Lstat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := fsstat.MarkOf(fi.Dev); !ok {
		t.Fatalf("no mount mark for %s: unique mount ids need Linux 6.8", dir)
	}
	opts := Options{DataWindow: time.Minute}
	killedWith := func(name string, dev uint64) *Store {
		t.Helper()
		s := reopen(t, path, opts)
		stop := runWriter(t, s)
		r := rec(name, 4, dev, 1)
		r.HashedAt = time.Now().UnixNano()
		mustPut(t, s, "/t/"+name, r)
		stop()
		if err := s.db.Close(); err != nil { // killed
			t.Fatal(err)
		}
		ro, err := Open(path, Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := ro.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := Compact(path, Options{}); err != nil {
			t.Fatal(err)
		}
		s = reopen(t, path, opts)
		if prev, ok := s.PreviousRun(); !ok || prev.Clean {
			t.Errorf("after check-db and compact: previous run %+v (%v); want the killed writer's", prev, ok)
		}
		return s
	}
	s := killedWith("here", fi.Dev)
	if len(s.Suspect()) != 0 {
		t.Errorf("suspect %v; want nothing, the mounts list kept through check-db and compact", s.Suspect())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = killedWith("nowhere", 1)
	defer s.Close()
	if len(s.Suspect()) != 1 {
		t.Errorf("suspect %v; want the window of the record on a made-up file system", s.Suspect())
	}
}

func reopen(t *testing.T, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The block surveys a run made within the data window before it ended
// without closing the index, of files on mounts that may not have kept
// its writes (made-up devices here), are dropped at the next open, with
// their counters: a power cut may have taken back the sharing they saw (a
// reflink deduplication the file system's log lost), which no record
// shows. An older survey stays.
func TestSurveysOfACutRunDropped(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "index.db")
	opts := Options{DataWindow: time.Minute}
	s, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	r, sv, seen := surveyFixture(t, s)
	cut := func(at time.Time) [3]int64 {
		t.Helper()
		sv.At = at.UnixNano()
		if err := s.PutSurvey(ctx, key.SHA256E, r.Digest, sv, seen); err != nil {
			t.Fatal(err)
		}
		stop() // the writer stops without closing, as a killed process does
		if err := s.db.Close(); err != nil {
			t.Fatal(err)
		}
		s, stop = reopenFeed(t, path, opts)
		mustCheck(t, s)
		return surveyStats(t, s)
	}
	if got := cut(time.Now().Add(-time.Hour)); got[0] != 1 || got[2] != 1024 {
		t.Errorf("a survey made before the window: surveyed, duplicate, reclaimable %v; want it kept", got)
	}
	if got := cut(time.Now()); got != [3]int64{} {
		t.Errorf("a survey made within the window: surveyed, duplicate, reclaimable %v; want it dropped", got)
	}
	stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// A writer left idle commits once more, empty, when the data window has
// passed since its last change and the file system the change was hashed
// on kept its writes: killed or cut off later, it leaves none of its
// records suspect after a reboot, where the window before its last commit
// would hold the last records it hashed. A file system that cannot say it
// kept them (here one no mount names) leaves the record suspect.
func TestIdleWriterSettles(t *testing.T) {
	fi, err := fsstat.Lstat(t.TempDir()) // the file system's identity, as the hasher records it
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		dev     uint64
		settles bool
	}{{"kept", fi.Dev, true}, {"not kept", 1, false}} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "index.db")
			const window = 300 * time.Millisecond
			opts := Options{DataWindow: window}
			s := reopen(t, path, opts)
			stop := runWriter(t, s)
			r := rec("a", 1, c.dev, 1)
			r.HashedAt = time.Now().UnixNano()
			mustPut(t, s, "/t/a", r)
			committed := time.Now()
			time.Sleep(time.Second) // over three windows
			stop()
			if err := s.db.Close(); err != nil { // as a killed process leaves it
				t.Fatal(err)
			}
			s = reopen(t, path, opts)
			defer s.Close()
			prev, ok := s.PreviousRun()
			if settled := ok && prev.LastCommit.After(committed.Add(window)); settled != c.settles {
				t.Fatalf("the idle writer's last commit %v, its last change %v: settled %v, want %v",
					prev.LastCommit, committed, settled, c.settles)
			}
			cut, ok := cutShort(prev, "another boot", false)
			if !ok || cut.Contains(r.HashedAt) == c.settles {
				t.Fatalf("after a reboot the span %v holds the record hashed at %d: %v", cut, r.HashedAt, cut.Contains(r.HashedAt))
			}
		})
	}
}
