package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/dedup"
	"github.com/annexd/annexd/store"
)

// A hardlink step a crash cut short is settled when the daemon starts,
// before it serves: the temporary link is gone, the name holds its own
// file, and the intent is dropped.
func TestRunRecoversDedup(t *testing.T) {
	root := t.TempDir()
	keeper, target := filepath.Join(root, "k"), filepath.Join(root, "t")
	writeOld(t, keeper, "same bytes")
	writeOld(t, target, "same bytes")
	temp := ".annexd-dedup-test1"
	if err := os.Link(keeper, filepath.Join(root, temp)); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, root)
	kst, tst := statOf(t, keeper), statOf(t, target)
	in := dedup.Intent{ID: "test1", Dir: []byte(root), Name: []byte("t"), Temp: temp, Dev: kst.Dev, Keeper: kst.Ino, Target: tst.Ino}
	withStore(t, cfg.Index, func(st *store.Store) {
		if err := dedup.NewMetaIntents(st).PutIntent(context.Background(), in); err != nil {
			t.Fatal(err)
		}
	})

	_, end := runApp(t, cfg, nil)
	ctx := context.Background()
	c := api.Dial(cfg.Socket)
	defer c.Close()
	var st api.Status
	var err error
	for deadline := time.Now().Add(30 * time.Second); !st.Idle; time.Sleep(20 * time.Millisecond) {
		st, err = c.Status(ctx)
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %+v, %v", st, err)
		}
	}
	if err := end(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, temp)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary link is still there: %v", err)
	}
	if got := statOf(t, target); got.Ino != tst.Ino {
		t.Errorf("%s is inode %d, want its own %d", target, got.Ino, tst.Ino)
	}
	withStore(t, cfg.Index, func(st *store.Store) {
		if ins, err := dedup.NewMetaIntents(st).Intents(); err != nil || len(ins) != 0 {
			t.Errorf("intents left: %v, %v", ins, err)
		}
	})
}

func statOf(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// withStore runs fn with the index at path open and its writer running.
func withStore(t *testing.T, path string, fn func(*store.Store)) {
	t.Helper()
	st, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	fn(st)
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("store run: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}
