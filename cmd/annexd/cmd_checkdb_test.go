package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annexd/annexd/store"
)

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
