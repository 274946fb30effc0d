package e2e

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkHubPublishCorpus publishes a whole tree's records through real
// daemons: a laptop annexd indexes ANNEXD_BENCH_CORPUS (the shared
// corpus) while the hub is down, then the NAS's annexd starts the hub and
// the laptop sends its index whole. It reports the time from the hub's
// start (and from the laptop's connection) until the hub has applied
// every change, the hub daemon's peak RSS, the hub's disk per record and
// the loopback bytes meanwhile (other loopback traffic on the machine
// counts too). Run it with -benchtime 1x.
func BenchmarkHubPublishCorpus(b *testing.B) {
	corpus := os.Getenv("ANNEXD_BENCH_CORPUS")
	if corpus == "" {
		b.Skip("set ANNEXD_BENCH_CORPUS to a tree, such as /work/corpus/T")
	}
	for range b.N {
		s := newHubSetup(b, "")
		l := s.laptop
		l.root, l.slowStart = corpus, true
		cfg, err := os.ReadFile(l.cfg)
		if err != nil {
			b.Fatal(err)
		}
		l.writeConfig(strings.Replace(string(cfg), "batch = 64", "batch = 4096", 1))
		start := time.Now()
		l.start()
		b.Logf("laptop indexed %s in %v", corpus, time.Since(start).Round(time.Millisecond))
		seq := l.status().Seq
		lo := loBytes(b)
		hubStart := time.Now()
		s.nas.start()
		var connected time.Time
		for deadline := time.Now().Add(hubWait); ; time.Sleep(10 * time.Millisecond) {
			st := l.status()
			if connected.IsZero() && st.Connected {
				connected = time.Now()
			}
			if st.Connected && st.IndexID != "" && st.Acked == st.Seq && !st.Resending {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("not caught up: %+v", st)
			}
		}
		done := time.Now()
		wire := loBytes(b) - lo
		hosts := s.nas.hubHosts()
		records := hosts["laptop"].Records
		rss := vmHWM(b, s.nas.d.cmd.Process.Pid)
		disk := duBytes(b, filepath.Join(s.nas.base, "index.db-hub"))
		took := done.Sub(connected)
		b.ReportMetric(float64(records)/took.Seconds(), "records/s")
		b.ReportMetric(done.Sub(hubStart).Seconds(), "s-from-hub-start")
		b.ReportMetric(took.Seconds(), "s-from-connect")
		b.ReportMetric(float64(wire)/float64(records), "lo-B/record")
		b.ReportMetric(float64(rss)/(1<<20), "hub-daemon-peak-MiB")
		b.ReportMetric(float64(disk)/float64(records), "hub-disk-B/record")
		b.Logf("%d changes, %d records at the hub; %v from the hub's start, %v from the laptop's connection; loopback %d B; hub daemon peak RSS %d MiB; hub dir %d B",
			seq, records, done.Sub(hubStart).Round(time.Millisecond), took.Round(time.Millisecond), wire, rss>>20, disk)
		s.laptop.stop()
		s.nas.stop()
	}
}

// loBytes is the bytes the loopback interface has carried.
func loBytes(b *testing.B) int64 {
	b.Helper()
	data, err := os.ReadFile("/sys/class/net/lo/statistics/rx_bytes")
	if err != nil {
		b.Fatal(err)
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n
}

// vmHWM is the process's peak resident set, in bytes.
func vmHWM(b *testing.B, pid int) int64 {
	b.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no VmHWM")
	return 0
}

// duBytes is the size of the files under dir.
func duBytes(b *testing.B, dir string) int64 {
	b.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n += fi.Size()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}
