package heal

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/loopfs"
)

// A rotten file another process holds open is not touched: a write
// through that descriptor after the swap would land in the bytes put
// aside, not at the name.
func TestHealBusyWhileOpen(t *testing.T) {
	e := newEnv(t, loopfs.Ext4)
	data := content(64 << 10)
	victim := e.write("a.bin", data)
	e.write("copy.bin", data)
	e.start(Options{})
	e.rot(victim)
	rotten, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	held, err := os.OpenFile(victim, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	f := e.healAll(false)[victim]
	if f.Outcome != Busy {
		t.Fatalf("heal of a file held open: %s: %s (%s)", f.Path, f.Outcome, f.Reason)
	}
	mustHold(t, victim, rotten)
	if got := temps(t, e.root); len(got) != 0 {
		t.Fatalf("temporary files left: %v", got)
	}
}

// A process that opens the rotten file by its name in the instant
// between the last check and the swap (its path lookup finds the rotten
// inode, then it waits on the lease) writes at the name: the heal puts
// the rotten file back and says so, and the edit is at the name.
func TestHealOpenedDuringSwap(t *testing.T) {
	e := newEnv(t, loopfs.Ext4)
	data := content(64 << 10)
	victim := e.write("a.bin", data)
	e.write("copy.bin", data)
	e.start(Options{})
	e.rot(victim)
	edit := []byte("the user's edit")
	wrote := make(chan error, 1)
	testHook = func(step, temp string) {
		if step != "leased" {
			return
		}
		go func() { wrote <- os.WriteFile(victim, edit, 0o640) }()
		time.Sleep(300 * time.Millisecond) // not a wait for a result: the open must be under way, waiting on the lease
	}
	defer func() { testHook = nil }()
	f := e.healAll(false)[victim]
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if f.Outcome != Busy {
		t.Fatalf("heal of a file opened during the swap: %s: %s (%s)", f.Path, f.Outcome, f.Reason)
	}
	mustHold(t, victim, edit)
	if got := temps(t, e.root); len(got) != 0 {
		t.Fatalf("temporary files left: %v", got)
	}
}

// hostsLate is a Remote whose other hosts cannot be asked for its first
// calls, then send the content it holds (the heal still checks it).
type hostsLate struct {
	down int
	data []byte
}

func (r *hostsLate) Fetch(ctx context.Context, key string, w io.Writer) (string, error) {
	if r.down > 0 {
		r.down--
		return "", fmt.Errorf("%w: the hub is not connected", ErrUnreachable)
	}
	_, err := w.Write(r.data)
	return "desktop", err
}

// A heal after a pass that could not ask other hosts (the hub not
// connected yet) is tried again soon, not only after the next pass.
func TestPartTriesAgainWhenHostsUnreachable(t *testing.T) {
	waits := retryWaits
	retryWaits = []time.Duration{20 * time.Millisecond, 20 * time.Millisecond}
	t.Cleanup(func() { retryWaits = waits }) // after the part stopped (cleanups run last first)
	e := newEnv(t, loopfs.Ext4)
	data := content(64 << 10)
	victim := e.write("a.bin", data)
	e.start(Options{Remote: &hostsLate{down: 2, data: data}})
	e.rot(victim)
	rotten, err := os.Lstat(victim)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	part := NewPart(e.heal, "any")
	var runErr error
	stopped := make(chan struct{})
	go func() { runErr = part.Run(ctx); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })
	part.Passed()
	// Watched by lstat, not by reading: a reader holding the file open
	// makes a heal "busy" (the write lease), which uses up a try.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Lstat(victim); err == nil && !os.SameFile(fi, rotten) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not healed once the hosts could be asked\n%s", e.log)
		}
	}
	cancel()
	<-stopped
	if runErr != nil {
		t.Fatal(runErr)
	}
	if b, err := os.ReadFile(victim); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("the healed file does not hold the copy's bytes: %v", err)
	}
}

// A heal that fails on the rotten file's side (no room for the copy) says
// so, and does not call the copy unhealthy: "0 of 1 copies healthy"
// would be untrue.
func TestHealFullFileSystemSaysSo(t *testing.T) {
	e := newEnv(t, loopfs.Ext4)
	data := content(256 << 10)
	victim := e.write("a.bin", data)
	e.write("copy.bin", data)
	e.start(Options{})
	e.rot(victim)
	rotten, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	fill, err := os.Create(e.fs.Path("filler"))
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 64<<10)
	for {
		if _, err := fill.Write(block); err != nil {
			break // full
		}
	}
	fill.Close()
	f := e.healAll(false)[victim]
	if f.Outcome != Refused || !strings.Contains(f.Reason, "no space") || strings.Contains(f.Reason, "healthy") {
		t.Fatalf("heal on a full file system: %s (%s)", f.Outcome, f.Reason)
	}
	mustHold(t, victim, rotten)
	if got := temps(t, e.root); len(got) != 0 {
		t.Fatalf("temporary files left: %v", got)
	}
}
