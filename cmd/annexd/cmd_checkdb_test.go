package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annexd/annexd/store"
)

// check-db and compact find the index where the daemon keeps it, and
// without a home directory refuse to guess.
func TestDefaultIndexPath(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	want := filepath.Join(state, "annexd", "index.db")
	for _, cmd := range []string{"check-db", "compact"} {
		var out, errb bytes.Buffer
		if code := run([]string{cmd}, &out, &errb); code != 2 || !strings.Contains(errb.String(), want) {
			t.Errorf("%s without an index at %s: exit %d, %q; want 2 naming it", cmd, want, code, errb.String())
		}
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "")
	for _, cmd := range []string{"check-db", "compact"} {
		var out, errb bytes.Buffer
		if code := run([]string{cmd}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--index") {
			t.Errorf("%s without a home: exit %d, %q; want 2 naming --index", cmd, code, errb.String())
		}
	}
}

func TestCheckDB(t *testing.T) {
	dir := t.TempDir()
	index := filepath.Join(dir, "index.db")
	s, err := store.Open(index, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	if err := s.Put(ctx, []byte("/a/b"), store.Record{State: store.StateUnreadable, Size: 3}); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	var out, errb bytes.Buffer
	if code := run([]string{"check-db", "--index", index, "--json"}, &out, &errb); code != 0 {
		t.Fatalf("check-db on a sound index: exit %d, %s%s", code, out.String(), errb.String())
	}
	var rep store.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Files != 1 || len(rep.Problems) != 0 {
		t.Fatalf("report %q: %+v %v", out.String(), rep, err)
	}

	foreign := filepath.Join(dir, "foreign")
	if err := os.WriteFile(foreign, []byte("not an index"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"check-db", "--index", foreign}, &out, &errb); code != 2 {
		t.Fatalf("check-db on a foreign file: exit %d", code)
	}
	if !strings.Contains(errb.String(), foreign) {
		t.Fatalf("error does not name the file: %q", errb.String())
	}
	if b, _ := os.ReadFile(foreign); string(b) != "not an index" {
		t.Fatal("check-db changed a foreign file")
	}
}

// A damaged file: check-db reports problems (exit 1) or, when the damage
// reaches the structures Open reads, says the index is corrupt (exit 2).
func TestCheckDBDamaged(t *testing.T) {
	index := filepath.Join(t.TempDir(), "index.db")
	s, err := store.Open(index, store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	for i := range 3000 {
		s.Submit(store.Change{Op: store.OpPut, Path: []byte(fmt.Sprintf("/d%d/f%d", i%17, i)),
			Record: store.Record{State: store.StateUnreadable, Size: int64(i), Ino: uint64(i)}}, nil)
	}
	if err := s.PutMeta(ctx, "flush", nil); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Overwrite the file from half of what its pages fill (past the meta
	// pages) to its end, which bbolt set aside for growth.
	fi, err := os.Stat(index)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(index, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	half := st.IndexBytes / 2
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5}, int(fi.Size()-half)), half); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var out, errb bytes.Buffer
	switch code := run([]string{"check-db", "--index", index}, &out, &errb); {
	case code == 1 && strings.Contains(out.String(), "problem:"):
	case code == 2 && strings.Contains(errb.String(), "corrupt") && strings.Contains(errb.String(), index):
	default:
		t.Fatalf("check-db on a damaged index: exit %d\n%s%s", code, out.String(), errb.String())
	}
}

func TestCheckDBWhileHeld(t *testing.T) {
	index := filepath.Join(t.TempDir(), "index.db")
	s, err := store.Open(index, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out, errb bytes.Buffer
	if code := run([]string{"check-db", "--index", index}, &out, &errb); code != exitCheckNoOpen {
		t.Fatalf("check-db of a held index: exit %d, want %d", code, exitCheckNoOpen)
	}
	if !strings.Contains(errb.String(), "stop annexd first") || !strings.Contains(errb.String(), index) {
		t.Fatalf("message %q should name the index and say to stop annexd", errb.String())
	}
}
