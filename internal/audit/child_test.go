package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/internal/indexer"
	"github.com/annexd/annexd/store"
)

// The audit's tests run some parts in a child process: one that is
// killed mid-pass, one that runs as another user.
const (
	childEnvIndex = "ANNEXD_AUDIT_CHILD_INDEX"
	childEnvRoot  = "ANNEXD_AUDIT_CHILD_ROOT"
	childEnvRate  = "ANNEXD_AUDIT_CHILD_RATE"
	childEnvChmod = "ANNEXD_AUDIT_CHILD_CHMOD0" // a file made unreadable after indexing
	// childEnvWindow sets the store's data window: how long before a
	// killed run's last commit its records count as suspect.
	childEnvWindow = "ANNEXD_AUDIT_CHILD_WINDOW"
)

func TestMain(m *testing.M) {
	if index := os.Getenv(childEnvIndex); index != "" {
		if err := childPass(index, os.Getenv(childEnvRoot)); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// childReport is what the child prints last.
type childReport struct {
	Run      RunSummary
	Last     *PassSummary
	Problems []Problem
}

// childPass does what the daemon does at a start (the indexer's scan,
// then the audit), goes on with the audit's pass by hand and prints the
// pass's progress ("done N") as it goes, then a childReport.
func childPass(index, root string) error {
	window, _ := time.ParseDuration(os.Getenv(childEnvWindow))
	st, err := store.Open(index, store.Options{DataWindow: window})
	if err != nil {
		return err
	}
	defer st.Close()
	h := hasher.New(hasher.DefaultPolicy(), nil)
	defer h.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ix, err := indexer.New(st, h, indexer.Options{Roots: []string{root}, Logger: log})
	if err != nil {
		return err
	}
	o := envOptions()
	o.Indexer, o.Logger = ix, log
	o.MaxRate, _ = strconv.ParseInt(os.Getenv(childEnvRate), 10, 64)
	a, err := New(st, h, o)
	if err != nil {
		return err
	}
	storeCtx, stopStore := context.WithCancel(context.Background())
	storeDone := make(chan struct{})
	go func() { defer close(storeDone); _ = st.Run(storeCtx) }()
	defer func() { stopStore(); <-storeDone }()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel, before the store stops
	defer cancel()
	wg.Add(1)
	go func() { defer wg.Done(); _ = ix.Run(ctx) }()
	ix.Rescan(root)
	if err := ix.WaitIdle(ctx); err != nil {
		return err
	}
	if rel := os.Getenv(childEnvChmod); rel != "" {
		if err := os.Chmod(filepath.Join(root, rel), 0); err != nil {
			return err
		}
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = a.Run(ctx) }()
	var id uint64
	for {
		if id, err = a.Start(ctx, StartOptions{}); err != ErrStopped {
			break
		}
		time.Sleep(time.Millisecond) // Run has not begun yet
	}
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if p := a.Status().Pass; p != nil {
				fmt.Printf("done %d\n", p.Done)
			}
		}
	}()
	s, err := a.WaitRun(ctx, id)
	close(done)
	if err != nil {
		return err
	}
	rep := childReport{Run: s, Last: a.Status().Last}
	if err := a.Problems(ctx, func(p Problem) error { rep.Problems = append(rep.Problems, p); return nil }); err != nil {
		return err
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	fmt.Printf("report %s\n", b)
	return nil
}

// child runs childPass on index and root with the given environment and
// credentials. When killAt > 0 it is SIGKILLed once it reports that many
// files done; otherwise its report is returned.
func child(t *testing.T, index, root string, rate int64, killAt int64, extraEnv []string, cred *syscall.Credential) (childReport, int64) {
	t.Helper()
	bin := os.Args[0]
	if cred != nil {
		bin = userBinary(t)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnvIndex+"="+index, childEnvRoot+"="+root, childEnvRate+"="+strconv.FormatInt(rate, 10))
	cmd.Env = append(cmd.Env, extraEnv...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var rep childReport
	var done int64
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "done "); ok {
			done, _ = strconv.ParseInt(n, 10, 64)
			if killAt > 0 && done >= killAt {
				_ = cmd.Process.Kill()
				break
			}
		}
		if b, ok := strings.CutPrefix(line, "report "); ok {
			if err := json.Unmarshal([]byte(b), &rep); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	if killAt > 0 {
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("the child was not killed (it finished first: %v)\n%s", err, stderr.String())
		}
		return rep, done
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, stderr.String())
	}
	return rep, done
}

// userBinary copies the test binary where another user can run it (the
// go tool builds it in a directory only its user may enter).
func userBinary(t *testing.T) string {
	t.Helper()
	dir := openTempDir(t)
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "audit.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// openTempDir is a t.TempDir that other users may enter.
func openTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
