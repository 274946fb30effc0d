package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// nobody is the uid other users' tests run as.
const nobody = 65534

// floodEnv makes the test binary flood the socket it names instead of
// running tests (TestFloodFromOtherUID runs it as uid 65534).
const floodEnv = "ANNEXD_E2E_FLOOD"

// Flood sizes: the attack that locked the owner out opened 39,000
// connections against a daemon with 20,000 descriptors; this one opens
// as many against a daemon with 1,024, holding up to floodHeld at once.
const (
	floodConns   = 40000
	floodHeld    = 4000
	floodWorkers = 32
	floodNoFile  = 1024
)

func init() {
	if sock := os.Getenv(floodEnv); sock != "" {
		os.Exit(flood(sock))
	}
}

// flood connects to sock from many goroutines, sending nothing and
// holding the connections, until stdin closes. It prints "flooded" once
// floodConns connections were made, and the counts at the end.
func flood(sock string) int {
	var made, busy atomic.Int64
	held := make(chan net.Conn, floodHeld)
	stop := make(chan struct{})
	go func() {
		bufio.NewReader(os.Stdin).ReadString('\n') // EOF when the test is done
		close(stop)
	}()
	var once sync.Once
	var wg sync.WaitGroup
	for range floodWorkers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("unix", sock)
				if errors.Is(err, syscall.EAGAIN) {
					busy.Add(1)
					continue
				}
				if err != nil {
					fmt.Println("dial:", err)
					return
				}
				if made.Add(1) == floodConns {
					once.Do(func() { fmt.Println("flooded") })
				}
				for placed := false; !placed; {
					select {
					case held <- c:
						placed = true
					case old := <-held: // full: let the oldest go
						old.Close()
					}
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("uid %d made %d connections, %d refused with EAGAIN\n", os.Getuid(), made.Load(), busy.Load())
	return 0
}

// TestFloodFromOtherUID: another uid that reaches the socket (a group
// socket, a chmod'ed copy) floods it with connections it holds open,
// against a daemon with 1,024 descriptors. The owner's status keeps
// answering throughout, the refusals fill neither the daemon's
// descriptors nor its log, and the daemon still answers afterwards.
func TestFloodFromOtherUID(t *testing.T) {
	t.Parallel()
	needRoot(t, "run a client as uid 65534")
	d := launch(t, func(root string) { write(t, filepath.Join(root, "a"), "a") },
		[]string{"prlimit", "--nofile=" + strconv.Itoa(floodNoFile), "--"}, "--calibrate", "never")
	d.waitIdle()
	dir, exe := openDir(t, os.Args[0])
	link := exposeSocket(t, d, dir)

	attacker := exec.Command(exe, "-test.run=^$")
	attacker.Env = append(os.Environ(), floodEnv+"="+link)
	attacker.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	stdin, err := attacker.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := attacker.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := attacker.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()

	// The owner asks for the status again and again until the attacker has
	// made all its connections: every answer must come.
	asked, maxFDs, slowest := 0, 0, time.Duration(0)
	var report []string
	for flooded := false; !flooded || asked < 10; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the attacker stopped early: %q", report)
			}
			report = append(report, l)
			flooded = flooded || l == "flooded"
		default:
		}
		began := time.Now()
		r := d.ctl("", "status")
		slowest = max(slowest, time.Since(began))
		asked++
		if r.code != 0 || !strings.Contains(r.stdout, "state:   idle") {
			t.Fatalf("status %d during the flood: exit %d\n%s%s", asked, r.code, r.stdout, r.stderr)
		}
		maxFDs = max(maxFDs, openFDs(t, d.cmd.Process.Pid))
	}
	stdin.Close()
	for l := range lines {
		report = append(report, l)
	}
	if err := attacker.Wait(); err != nil {
		t.Errorf("attacker: %v %q", err, report)
	}
	t.Logf("%d status answers during the flood, the slowest in %v; the daemon held at most %d descriptors; attacker: %q",
		asked, slowest.Round(time.Millisecond), maxFDs, report)
	if maxFDs >= floodNoFile*3/4 {
		t.Errorf("the daemon held %d descriptors of %d during the flood", maxFDs, floodNoFile)
	}
	if r := d.ctl("", "status"); r.code != 0 {
		t.Errorf("status after the flood: exit %d %s", r.code, r.stderr)
	}
	if n := strings.Count(d.log.String(), "api refused"); n == 0 || n > 3 {
		t.Errorf("%d log lines about refused connections, want one a minute:\n%s", n, d.log)
	}
}

// openFDs counts the descriptors process pid holds.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
