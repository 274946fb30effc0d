package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annexd/annexd/store"
)

// fillIndex writes n records and deletes every other one, so the file holds
// free pages for compact to drop.
func fillIndex(t *testing.T, index string, n int) {
	t.Helper()
	s, err := store.Open(index, store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	for i := range n {
		s.Submit(store.Change{Op: store.OpPut, Path: []byte(fmt.Sprintf("/d%d/f%d", i%23, i)),
			Record: store.Record{State: store.StateUnreadable, Size: int64(i), Ino: uint64(i + 1)}}, nil)
	}
	for i := 0; i < n; i += 2 {
		s.Submit(store.Change{Op: store.OpDelete, Path: []byte(fmt.Sprintf("/d%d/f%d", i%23, i))}, nil)
	}
	if err := s.PutMeta(ctx, "flush", nil); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCompact(t *testing.T) {
	index := filepath.Join(t.TempDir(), "index.db")
	fillIndex(t, index, 6000)

	var out, errb bytes.Buffer
	if code := run([]string{"compact", "--index", index}, &out, &errb); code != 0 {
		t.Fatalf("compact: exit %d, %s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "3000 files") {
		t.Fatalf("compact output %q does not count the 3000 records left", out.String())
	}
	out.Reset()
	if code := run([]string{"check-db", "--index", index}, &out, &errb); code != 0 {
		t.Fatalf("check-db after compact: exit %d, %s%s", code, out.String(), errb.String())
	}
	s, err := store.Open(index, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok, err := s.Get([]byte("/d1/f1")); err != nil || !ok {
		t.Fatalf("a kept record is gone after compact: ok=%v err=%v", ok, err)
	}
	if _, ok, _ := s.Get([]byte("/d0/f0")); ok {
		t.Fatal("a deleted record is back after compact")
	}
}

func TestCompactWhileOpen(t *testing.T) {
	index := filepath.Join(t.TempDir(), "index.db")
	fillIndex(t, index, 10)
	s, err := store.Open(index, store.Options{LockTimeout: 50e6})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out, errb bytes.Buffer
	if code := run([]string{"compact", "--index", index}, &out, &errb); code != exitUsage {
		t.Fatalf("compact of a held index: exit %d, want %d", code, exitUsage)
	}
	if !strings.Contains(errb.String(), "stop annexd first") || !strings.Contains(errb.String(), index) {
		t.Fatalf("message %q should name the index and say to stop annexd", errb.String())
	}
}
