package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
)

// machine stands for what the kernel says of a machine's busyness: the
// load average and the pressure stall information. The daemon runs in a
// mount namespace of its own where files the test writes are bound over
// /proc/loadavg and /proc/pressure/{cpu,io}: the real daemon reads them
// where it reads the kernel's, and the test decides what they say. The
// tests share the machine with others, whose real load and pressure no
// test can set.
type machine struct {
	dir      string
	mu       sync.Mutex
	cpu, io  float64       // pressure now, percent of the time
	cpuTotal time.Duration // the "some" totals, advanced by the pressure
	ioTotal  time.Duration
	stop     chan struct{}
	done     chan struct{}
}

// newMachine writes the files with a load average of load and no
// pressure, and keeps the totals going every 100 ms until the test ends.
func newMachine(t *testing.T, load float64) *machine {
	t.Helper()
	m := &machine{dir: t.TempDir(), stop: make(chan struct{}), done: make(chan struct{})}
	write(t, filepath.Join(m.dir, "loadavg"), fmt.Sprintf("%07.2f %07.2f %07.2f 1/100 1\n", load, load, load))
	m.flush(t)
	go func() {
		defer close(m.done)
		for last := time.Now(); ; {
			select {
			case <-m.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			now := time.Now()
			m.mu.Lock()
			el := now.Sub(last)
			m.cpuTotal += time.Duration(float64(el) * m.cpu / 100)
			m.ioTotal += time.Duration(float64(el) * m.io / 100)
			m.mu.Unlock()
			last = now
			m.flush(nil)
		}
	}()
	t.Cleanup(func() { close(m.stop); <-m.done })
	return m
}

// set makes tasks wait cpu and io percent of the time from now on.
func (m *machine) set(cpu, io float64) {
	m.mu.Lock()
	m.cpu, m.io = cpu, io
	m.mu.Unlock()
	m.flush(nil)
}

// flush rewrites the pressure files in place, at one length and in one
// write each: the bound inode stays, and a reader never sees a file cut
// short.
func (m *machine) flush(t *testing.T) {
	m.mu.Lock()
	files := map[string]string{"cpu": psiLines(m.cpu, m.cpuTotal), "io": psiLines(m.io, m.ioTotal)}
	m.mu.Unlock()
	for name, body := range files {
		f, err := os.OpenFile(filepath.Join(m.dir, name), os.O_WRONLY|os.O_CREATE, 0o644)
		if err == nil {
			_, err = f.WriteAt([]byte(body), 0)
			f.Close()
		}
		if err != nil && t != nil {
			t.Fatal(err)
		}
	}
}

func psiLines(avg10 float64, total time.Duration) string {
	return fmt.Sprintf("some avg10=%06.2f avg60=%06.2f avg300=%06.2f total=%020d\nfull avg10=000.00 avg60=000.00 avg300=000.00 total=%020d\n",
		avg10, avg10, avg10, total.Microseconds(), 0)
}

// wrap runs annexd in a mount namespace with the files bound over /proc.
func (m *machine) wrap() []string {
	return inOwnMounts(filepath.Dir(m.dir), `mount --bind "$D/loadavg" /proc/loadavg && mount --bind "$D/cpu" /proc/pressure/cpu && `+
		`mount --bind "$D/io" /proc/pressure/io`)
}

// wrapNoPressure runs annexd in a mount namespace with the load average
// bound over /proc/loadavg and an empty directory over /proc/pressure, as
// on a kernel without pressure information.
func (m *machine) wrapNoPressure() []string {
	if err := os.MkdirAll(filepath.Join(m.dir, "none"), 0o755); err != nil {
		panic(err)
	}
	return inOwnMounts(filepath.Dir(m.dir), `mount --bind "$D/loadavg" /proc/loadavg && mount --bind "$D/none" /proc/pressure`)
}

// setLoad makes the load average load from now on.
func (m *machine) setLoad(t *testing.T, load float64) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(m.dir, "loadavg"), os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteAt([]byte(fmt.Sprintf("%07.2f %07.2f %07.2f 1/100 1\n", load, load, load)), 0)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// env passes the files' directory to wrap's script.
func (m *machine) env(env []string) []string { return append(env, "D="+m.dir) }

// startGated starts annexd on a root of n files with conf, under m.
func startGated(t *testing.T, m *machine, conf string, n int) *daemon {
	t.Helper()
	if _, err := os.Stat("/proc/pressure/cpu"); err != nil {
		t.Skip("this kernel has no pressure stall information")
	}
	base := dedupBase(t, conf)
	root := filepath.Join(base, "root")
	for i := range n {
		writeAged(t, filepath.Join(root, fmt.Sprintf("f%02d.bin", i)), uint64(i+1), 8<<10)
	}
	d := spawn(t, annexdRun{base: base, roots: []string{root}, wrap: m.wrap(), env: m.env})
	d.waitIdle()
	return d
}

// A load average of 25 per CPU from tasks nobody waits for does not hold
// the audit back where the kernel tells the pressure: with tasks waiting
// for a CPU or for I/O 3 % of the time, a run reads everything.
func TestAuditGateFollowsPressureNotLoad(t *testing.T) {
	m := newMachine(t, 50)
	m.set(3, 3)
	d := startGated(t, m, "[audit]\nignore_battery = true\n", 10)
	r := d.ctl("", "audit", "run", "--wait", "--json", "--time-limit", "40s")
	var run api.AuditRun
	if err := json.Unmarshal([]byte(r.stdout), &run); err != nil {
		t.Fatalf("audit run: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r.code != 0 || run.StoppedBy != api.AuditDone || run.Counts["ok"] != 10 {
		t.Fatalf("audit run under a load of 50 and no pressure: exit %d, %+v, stderr %q\n%s", r.code, run, r.stderr, d.log)
	}
	if strings.Contains(r.stderr, "load average") || strings.Contains(d.log.String(), "load average") {
		t.Errorf("the load average was heeded with pressure information at hand: %q\n%s", r.stderr, d.log)
	}
}

// An audit run waiting for a busy machine says so at once, also piped:
// why, and how to read now. Once the pressure falls, it reads.
func TestAuditRunSaysWhyItWaits(t *testing.T) {
	m := newMachine(t, 0.1)
	d := startGated(t, m, "[audit]\nignore_battery = true\n", 5)
	m.set(90, 0)
	began := time.Now()
	cmd := exec.Command(bin.annexctl, "audit", "run", "--wait", "--json")
	cmd.Env = d.env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var said atomic.Int64 // when the waiting line came, after began
	lines, errDone := make(chan string, 256), make(chan struct{})
	go func() {
		defer close(errDone)
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "waits:") && said.Load() == 0 {
				said.Store(int64(time.Since(began)))
			}
			lines <- sc.Text()
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for said.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	m.set(0, 0)
	out, outDone := new(strings.Builder), make(chan struct{})
	go func() {
		defer close(outDone)
		b := bufio.NewReader(stdout)
		_, _ = b.WriteTo(out)
	}()
	waitErr := make(chan error, 1)
	go func() { // Wait closes the pipes: only once both are read to their ends
		<-outDone
		<-errDone
		waitErr <- cmd.Wait()
	}()
	select {
	case err := <-waitErr:
		if err != nil {
			t.Errorf("audit run --wait: %v", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("audit run --wait still waiting 90 s after the pressure fell\n%s", d.log)
	}
	var got []string
	for l := range lines {
		got = append(got, l)
	}
	after := time.Duration(said.Load())
	if after == 0 || after > 5*time.Second {
		t.Fatalf("the waiting line came after %v (0: never); want it within 5 s. stderr: %q", after, got)
	}
	note := strings.Join(got, "\n")
	for _, want := range []string{"waits: the machine is busy: tasks waited for a CPU", "max_pressure = 40%", "--full-speed"} {
		if !strings.Contains(note, want) {
			t.Errorf("stderr %q lacks %q", note, want)
		}
	}
	var run api.AuditRun
	if err := json.Unmarshal([]byte(out.String()), &run); err != nil || run.StoppedBy != api.AuditDone || run.Counts["ok"] != 5 {
		t.Errorf("the run once the pressure fell: %q, %v", out.String(), err)
	}
}

// A trickle of changes, one log line every 0.3 s, does not starve a run
// asked for by hand: it reads the files the indexer does not hold.
func TestAuditTrickleDoesNotStarve(t *testing.T) {
	base := dedupBase(t, auditConf)
	root := filepath.Join(base, "root")
	for i := range 20 {
		writeAged(t, filepath.Join(root, fmt.Sprintf("f%02d.bin", i)), uint64(i+1), 8<<10)
	}
	// The default quiet delay, a second: a file appended to every 0.3 s
	// never settles, so the watcher always holds a change.
	d := spawn(t, annexdRun{base: base, roots: []string{root}, extra: []string{"--quiet-delay", "1s"}})
	d.waitIdle()
	logf, err := os.OpenFile(filepath.Join(root, "app.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer logf.Close()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			fmt.Fprintf(logf, "line %d\n", i)
		}
	})
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(time.Second) // the trickle is on
	code, run := auditRun(t, d, "--time-limit", "30s")
	if code != 0 || run.StoppedBy != api.AuditDone || run.Counts["ok"] < 20 {
		t.Fatalf("audit run beside a log appended every 0.3 s: exit %d, %+v\n%s", code, run, d.log)
	}
}
