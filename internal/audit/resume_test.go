package audit

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/annexd/annexd/store"
)

// A daemon killed (SIGKILL, fsync on) in the middle of a pass goes on with
// that pass after a restart, twice: no file is read again once verified,
// none is counted twice, and the pass ends with every file counted once.
func TestKilledMidPassResumes(t *testing.T) {
	root := t.TempDir()
	const n = 200
	files := writeFiles(t, root, n)
	var total int64
	for _, p := range files {
		fi, _ := os.Stat(p)
		total += fi.Size()
	}
	index := filepath.Join(t.TempDir(), "index.db")
	rate := total / 20 // the pass takes 20 s at least: the kills land in it
	// A killed run leaves the records it hashed in its last moments
	// suspect, and a restart's indexer hashes them again itself
	// (store.Trusted; internal/daemon's uncleanend test). Here the
	// files were hashed seconds before the pass: a window of 1 ms keeps
	// them trusted, so the pass, not the indexer, verifies them.
	env := []string{childEnvWindow + "=1ms"}
	_, done1 := child(t, index, root, rate, 40, env, nil)
	_, done2 := child(t, index, root, rate, done1+40, env, nil)
	if done2 < done1+40 {
		t.Fatalf("second child reported %d done, the first %d", done2, done1)
	}
	rep, _ := child(t, index, root, -1, 0, env, nil)
	t.Logf("killed at %d and %d files done; the last run verified %d", done1, done2, rep.Run.Found(OK))
	if rep.Last == nil || rep.Last.ID != 1 || rep.Last.Counts["ok"] != n || len(rep.Last.Counts) != 1 {
		t.Fatalf("pass summary %+v", rep.Last)
	}
	if got := rep.Run.Found(OK); got > n-done2 || got == 0 || len(rep.Run.Counts) != 1 {
		t.Fatalf("the last run verified %d files; %d were done before it", got, done2)
	}
	st, err := store.Open(index, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, p := range files {
		r, ok, err := st.Get([]byte(p))
		if err != nil || !ok || r.VerifiedAt <= r.HashedAt || r.State != store.StateOK {
			t.Fatalf("%s after the pass: %+v %v %v", p, r, ok, err)
		}
	}
}

// A file its owner made unreadable (chmod 000) is reported unreadable to
// an audit running as that owner, not root, and keeps its digest.
func TestUnreadableAsUser(t *testing.T) {
	const uid, gid = 65534, 65534
	base := openTempDir(t)
	root, state := filepath.Join(base, "tree"), filepath.Join(base, "state")
	for _, d := range []string{root, state} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := writeFiles(t, root, 3)
	for _, p := range append(files, root, state, filepath.Dir(files[0]), filepath.Dir(files[1]), filepath.Dir(files[2])) {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	rel, _ := filepath.Rel(root, files[1])
	index := filepath.Join(state, "index.db")
	rep, _ := child(t, index, root, -1, 0, []string{childEnvChmod + "=" + rel}, &syscall.Credential{Uid: uid, Gid: gid})
	if rep.Run.Found(Unreadable) != 1 || rep.Run.Found(OK) != 2 {
		t.Fatalf("counts %v", rep.Run.Counts)
	}
	if len(rep.Problems) != 1 || string(rep.Problems[0].Path) != files[1] || rep.Problems[0].Class != Unreadable ||
		rep.Problems[0].RecordedKey == "" {
		t.Fatalf("problems %+v", rep.Problems)
	}
	st, err := store.Open(index, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if r, _, _ := st.Get([]byte(files[1])); r.State != store.StateUnreadable || !r.HasDigest() {
		t.Fatalf("record of the unreadable file: %+v", r)
	}
}
