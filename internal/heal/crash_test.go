package heal

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/internal/audit"
	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/store"
)

// The environment of a child process that heals one file and is killed.
const (
	childIndex = "ANNEXD_HEAL_CHILD_INDEX"
	childPath  = "ANNEXD_HEAL_CHILD_PATH"
	childStep  = "ANNEXD_HEAL_CHILD_STEP" // a step name: SIGKILL there; "": the parent kills
)

// A SIGKILL at every step of a heal, and at random times, leaves at the
// name either the rotten file or the healed one, never neither; the
// restart's recovery leaves no temporary file, keeps the rotten bytes of
// every heal that swapped, and lifts its finding; a heal that did not
// swap leaves the finding standing.
func TestHealSIGKILL(t *testing.T) {
	e := newEnv(t, loopfs.Ext4)
	steps := []string{"chosen", "filled", "verified", "leased", "exchanged", "aside", "", "", "", ""}
	datas := make([][]byte, len(steps))
	victims := make([]string, len(steps))
	for i := range steps {
		datas[i] = content(1 << 20)
		victims[i] = e.write(fmt.Sprintf("v%d.bin", i), datas[i])
		e.write(fmt.Sprintf("c%d.bin", i), datas[i])
	}
	e.start(Options{})
	e.rot(victims...)
	rotten := make([][]byte, len(steps))
	for i, v := range victims {
		rotten[i], _ = os.ReadFile(v)
	}
	e.stop()

	for i, st := range steps {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHealChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), childIndex+"="+e.index, childPath+"="+victims[i], childStep+"="+st)
		var out bytes.Buffer
		cmd.Stderr = &out
		ready, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(ready).ReadString('\n')
		if st == "" { // a random time into the heal
			time.Sleep(time.Duration(rand.Int64N(int64(80 * time.Millisecond))))
			cmd.Process.Signal(syscall.SIGKILL)
		}
		if line != "ready\n" {
			t.Fatalf("step %q: the child said %q\n%s", st, line, out.String())
		}
		err = cmd.Wait()
		if st != "" {
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
				t.Fatalf("step %q: the child was not killed: %v\n%s", st, err, out.String())
			}
		}
		got, err := os.ReadFile(victims[i])
		if err != nil {
			t.Fatalf("step %q: the name holds nothing: %v", st, err)
		}
		if !bytes.Equal(got, rotten[i]) && !bytes.Equal(got, datas[i]) {
			t.Fatalf("step %q: the name holds neither the rotten nor the healed bytes", st)
		}
	}

	r := &env{t: t, fs: e.fs, root: e.root, index: e.index, log: e.log}
	r.start(Options{})
	if err := r.heal.Recover(context.Background()); err != nil {
		t.Fatalf("recover: %v\nlog:\n%s", err, r.log)
	}
	if got := temps(t, r.root); len(got) != 0 {
		t.Fatalf("temporary files left after recovery: %v", got)
	}
	n := 0
	_ = r.st.MetaPrefix(context.Background(), metaIntent, func(string, []byte) error { n++; return nil })
	if n != 0 {
		t.Fatalf("%d heal intents left", n)
	}
	probs := r.problems()
	asides, _ := filepath.Glob(filepath.Join(r.root, TempPrefix+"*"+AsideSuffix))
	healed := 0
	for i, v := range victims {
		got, _ := os.ReadFile(v)
		_, flagged := probs[v]
		switch {
		case bytes.Equal(got, datas[i]):
			healed++
			if flagged {
				t.Errorf("step %q: healed, yet the finding stands", steps[i])
			}
			if !keptAside(asides, rotten[i]) {
				t.Errorf("step %q: healed, and the rotten bytes are not kept aside", steps[i])
			}
		case !flagged:
			t.Errorf("step %q: not healed, and the finding is gone", steps[i])
		}
	}
	if healed != len(asides) {
		t.Fatalf("%d healed, %d kept aside", healed, len(asides))
	}
	t.Logf("%d of %d killed heals had swapped", healed, len(steps))
}

func keptAside(asides []string, rotten []byte) bool {
	for _, a := range asides {
		if b, err := os.ReadFile(a); err == nil && bytes.Equal(b, rotten) {
			return true
		}
	}
	return false
}

// TestHealChild is the child of TestHealSIGKILL: it heals one file and
// kills itself at the step named, or waits for the parent's SIGKILL.
func TestHealChild(t *testing.T) {
	index := os.Getenv(childIndex)
	if index == "" {
		t.Skip("run by TestHealSIGKILL")
	}
	path, at := os.Getenv(childPath), os.Getenv(childStep)
	st, err := store.Open(index, store.Options{NoSync: true, MaxDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	go st.Run(ctx)
	h := hasher.New(hasher.DefaultPolicy(), nil)
	a, err := audit.New(st, h, audit.Options{Config: audit.Config{MaxRate: -1, MaxLoad: -1, IgnoreBattery: true, Jitter: -1, Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	go a.Run(ctx)
	testHook = func(step, temp string) {
		if step == at {
			unix.Kill(os.Getpid(), unix.SIGKILL)
		}
	}
	hl := New(st, a, h, Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err := a.Problems(ctx, func(audit.Problem) error { return nil }); err != nil { // the audit is loaded
		t.Fatal(err)
	}
	fmt.Println("ready")
	if _, err := hl.Heal(ctx, [][]byte{[]byte(path)}, false); err != nil {
		t.Fatal(err)
	}
	if at != "" {
		t.Fatalf("step %q never came", at)
	}
	time.Sleep(time.Minute) // the parent kills
}
