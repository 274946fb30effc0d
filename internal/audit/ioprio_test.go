package audit

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// idleIO changes the calling thread's class and no other thread's.
func TestIdleIO(t *testing.T) {
	done := make(chan [2]int)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		before, _ := ioClass()
		if err := idleIO(); err != nil {
			t.Error(err)
		}
		after, _ := ioClass()
		done <- [2]int{before, after}
	}()
	got := <-done
	if got[1] != ioprioClassIdle || got[0] == ioprioClassIdle {
		t.Fatalf("class before %d, after %d; want idle (%d) only after", got[0], got[1], ioprioClassIdle)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if c, _ := ioClass(); c == ioprioClassIdle {
		t.Fatal("another thread's class changed too")
	}
}

// The scheduler is read from sysfs for a whole disk and for a partition,
// whose queue is its disk's.
func TestSchedulerOf(t *testing.T) {
	sys := t.TempDir()
	disk := filepath.Join(sys, "devices", "vda")
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(disk, "queue", "scheduler"), "mq-deadline kyber [bfq] none\n")
	if err := os.MkdirAll(filepath.Join(disk, "vda1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(sys, "dev", "block"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"254:0": disk, "254:1": filepath.Join(disk, "vda1")} {
		if err := os.Symlink(target, filepath.Join(sys, "dev", "block", name)); err != nil {
			t.Fatal(err)
		}
	}
	for dev, want := range map[uint64]string{unix.Mkdev(254, 0): "bfq", unix.Mkdev(254, 1): "bfq", unix.Mkdev(0, 42): ""} {
		if got := schedulerOf(sys, dev); got != want {
			t.Errorf("schedulerOf(%d:%d) = %q, want %q", unix.Major(dev), unix.Minor(dev), got, want)
		}
	}
	if !idleHonoured("bfq") || idleHonoured("mq-deadline") || idleHonoured("none") {
		t.Error("idleHonoured")
	}
	// The machine's own root device answers something or nothing, never a crash.
	var st unix.Stat_t
	if unix.Stat("/", &st) == nil {
		t.Logf("scheduler of /: %q", schedulerOf("/sys", uint64(st.Dev)))
	}
}
