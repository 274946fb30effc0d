package hub_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/annexd/annexd/internal/hub"
	"github.com/annexd/annexd/internal/publish"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// The benchmarks run the hub in a child process (this test binary again)
// so its memory is its own: TestMain serves as the child when told to.
const (
	childEnv    = "ANNEXD_HUB_BENCH_CHILD" // "hub" or "kv"
	childDir    = "ANNEXD_HUB_BENCH_DIR"
	childHosts  = "ANNEXD_HUB_BENCH_HOSTS"  // name=bcrypt,…
	childListen = "ANNEXD_HUB_BENCH_LISTEN" // host:port, default any loopback port
	benchPass   = "bench-secret"
)

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "hub":
		os.Exit(serveHub())
	case "kv":
		os.Exit(serveKV())
	}
	os.Exit(m.Run())
}

// serveHub runs a hub until its standard input closes.
func serveHub() int {
	var hosts []hub.Host
	for _, kv := range strings.Split(os.Getenv(childHosts), ",") {
		name, hash, _ := strings.Cut(kv, "=")
		hosts = append(hosts, hub.Host{Name: name, Password: hash})
	}
	listen := os.Getenv(childListen)
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	h, err := hub.New(hub.Config{Listen: listen, Dir: os.Getenv(childDir), Hosts: hosts, MaxStreamBytes: 4 << 30})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	select {
	case <-h.Ready():
	case err := <-done:
		fmt.Println("ERR", err)
		return 1
	}
	fmt.Println("URL", h.ClientURL())
	_, _ = io.Copy(io.Discard, os.Stdin)
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// serveKV runs a bare JetStream server for the key-value comparison.
func serveKV() int {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: os.Getenv(childDir), NoLog: true, NoSigs: true, JetStreamMaxStore: 16 << 30})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		fmt.Println("ERR not ready")
		return 1
	}
	fmt.Println("URL", s.ClientURL())
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Shutdown()
	return 0
}

// child is a hub (or bare server) running in another process.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	url   string
	dir   string
}

func startChild(b testing.TB, mode string, hosts []string) *child {
	b.Helper()
	return startChildAt(b, mode, hosts, b.TempDir(), "")
}

// startChildAt starts a child on dir, listening on listen (empty: any
// loopback port).
func startChildAt(b testing.TB, mode string, hosts []string, dir, listen string) *child {
	b.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(benchPass), bcrypt.MinCost)
	if err != nil {
		b.Fatal(err)
	}
	var hs []string
	for _, h := range hosts {
		hs = append(hs, h+"="+string(hash))
	}
	c := &child{dir: dir}
	c.cmd = exec.Command(os.Args[0])
	c.cmd.Env = append(os.Environ(), childEnv+"="+mode, childDir+"="+c.dir, childHosts+"="+strings.Join(hs, ","), childListen+"="+listen)
	c.cmd.Stderr = os.Stderr
	c.stdin, _ = c.cmd.StdinPipe()
	out, _ := c.cmd.StdoutPipe()
	if err := c.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "URL ") {
		b.Fatalf("child: %q %v", line, err)
	}
	c.url = strings.TrimSpace(strings.TrimPrefix(line, "URL "))
	b.Cleanup(func() { c.stop(b) })
	return c
}

func (c *child) stop(b testing.TB) {
	if c.cmd.Process == nil || c.cmd.ProcessState != nil {
		return
	}
	_ = c.stdin.Close()
	if err := c.cmd.Wait(); err != nil {
		b.Errorf("child: %v", err)
	}
}

// kill ends the child at once (SIGKILL), as a crash or a power cut of
// the process would.
func (c *child) kill(b testing.TB) {
	if err := c.cmd.Process.Kill(); err != nil {
		b.Fatal(err)
	}
	_ = c.cmd.Wait()
}

// memory returns the child's resident and peak resident bytes.
func (c *child) memory(b testing.TB) (rss, peak float64) {
	m := c.status(b)
	return m["VmRSS:"], m["VmHWM:"]
}

// reportMemory reports the child's memory: resident, peak, and the part
// of resident that is not mapped files (bbolt maps its file: those pages
// are the page cache, which the kernel may drop).
func (c *child) reportMemory(b *testing.B, prefix string) {
	m := c.status(b)
	b.ReportMetric(m["VmRSS:"]/1e6, prefix+"-rss-MB")
	b.ReportMetric(m["VmHWM:"]/1e6, prefix+"-peak-MB")
	b.ReportMetric(m["RssAnon:"]/1e6, prefix+"-anon-MB")
	b.ReportMetric(m["RssFile:"]/1e6, prefix+"-filemapped-MB")
}

func (c *child) status(b testing.TB) map[string]float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		out[f[0]] = kb * 1024
	}
	return out
}

// diskBytes is what the files under dir take on disk: blocks allocated,
// since bbolt grows its file by truncate, ahead of the pages it writes.
func diskBytes(b testing.TB, dir string) float64 {
	var n int64
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := os.Stat(p); err == nil {
				n += fi.Sys().(*syscall.Stat_t).Blocks * 512
			}
		}
		return nil
	})
	return float64(n)
}

// benchHost is a host for the benchmarks: an index (no fsync: the host's
// disk is not what is measured) and its publisher.
type benchHost struct {
	name  string
	st    *store.Store
	stopW func()
	pub   *publish.Publisher
	stopP context.CancelFunc
	doneP chan error
	id    [16]byte
	batch int // changes a batch; default the publisher's
	inst  *publish.Instance
}

func newBenchHost(b testing.TB, name string) *benchHost {
	b.Helper()
	st, err := store.Open(filepath.Join(b.TempDir(), "index.db"), store.Options{NoSync: true, Changes: true})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = st.Run(ctx) }()
	inst, err := publish.LoadInstance("") // kept through restarts, as in one boot
	if err != nil {
		b.Fatal(err)
	}
	h := &benchHost{name: name, st: st, stopW: func() { cancel(); wg.Wait() }, inst: inst}
	copy(h.id[:], name)
	b.Cleanup(func() { h.stopPublisher(); h.stopW(); st.Close() })
	return h
}

func (h *benchHost) startPublisher(b testing.TB, url string) {
	b.Helper()
	p, err := publish.New(h.st, publish.Config{Name: h.name, HostID: h.id, URL: url,
		Options: []nats.Option{nats.UserInfo(h.name, benchPass)}, Poll: 5 * time.Millisecond, Timeout: 30 * time.Second,
		Batch: h.batch, Instance: h.inst})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	h.pub, h.stopP, h.doneP = p, cancel, done
}

func (h *benchHost) stopPublisher() {
	if h.stopP != nil {
		h.stopP()
		<-h.doneP
		h.stopP = nil
	}
}

// caughtUp waits until the hub has applied every change of h.
func (h *benchHost) caughtUp(b testing.TB) {
	b.Helper()
	deadline := time.Now().Add(time.Hour)
	for {
		local, err := h.st.ChangeLog()
		if err != nil {
			b.Fatal(err)
		}
		if s := h.pub.Status(); s.IndexID == local.IndexID.String() && s.Acked == local.Seq && !s.Resending {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s did not catch up: %+v", h.name, h.pub.Status())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (h *benchHost) submit(b testing.TB, cs []store.Change) {
	b.Helper()
	errs := make(chan error, 1024)
	go func() {
		for _, c := range cs {
			h.st.Submit(c, func(err error) { errs <- err })
		}
	}()
	for range cs {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

func record(d []byte, size int64, ino uint64) store.Record {
	return store.Record{Backend: key.SHA256E, Digest: d, Size: size, MtimeNs: 1_700_000_000e9, CtimeNs: 1_700_000_000e9,
		Dev: 2049, Ino: ino, HashedAt: 1_700_000_001e9}
}

// corpusChanges are the shared corpus's records when its manifest is
// there, else a synthetic tree of the same shape.
func corpusChanges(b *testing.B) ([]store.Change, string) {
	const manifest = "/work/corpus/T.manifest.tsv"
	var cs []store.Change
	if f, err := os.Open(manifest); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Split(sc.Text(), "\t")
			if len(fields) < 3 {
				continue
			}
			size, _ := strconv.ParseInt(fields[1], 10, 64)
			d, err := hex.DecodeString(fields[2])
			if err != nil || len(d) != 32 {
				continue
			}
			cs = append(cs, store.Change{Op: store.OpPut, Path: []byte("/home/user/" + fields[0]), Record: record(d, size, uint64(len(cs)+1))})
		}
		if len(cs) > 0 {
			slices.SortFunc(cs, func(x, y store.Change) int { return strings.Compare(string(x.Path), string(y.Path)) })
			return cs, manifest
		}
	}
	return synthetic(0, 60000, 0), "synthetic"
}

// synthetic makes n records of a host: paths in 50 files a directory; a
// share of contents common to every host (content ids below shared).
func synthetic(host, n, shared int) []store.Change {
	rng := rand.New(rand.NewPCG(uint64(host), 7))
	cs := make([]store.Change, n)
	for i := range cs {
		id := uint64(host)<<40 | uint64(i)
		if shared > 0 && rng.IntN(2) == 0 {
			id = uint64(rng.IntN(shared))
		}
		d := sha256.Sum256(binary.AppendUvarint(nil, id))
		cs[i] = store.Change{Op: store.OpPut, Path: synthPath(i), Record: record(d[:], int64(1000+id%50000), uint64(i+1))}
	}
	return cs
}

func synthPath(i int) []byte {
	return fmt.Appendf(nil, "/home/u/Documents/project%04d/sub%03d/file_%07d.dat", i/5000, i/50%100, i)
}

// BenchmarkPublishCorpus: one host resends the corpus's records to a hub
// in another process over loopback TCP: time, bytes on the wire, the
// hub's memory and disk.
func BenchmarkPublishCorpus(b *testing.B) {
	cs, src := corpusChanges(b)
	b.Logf("%d records from %s", len(cs), src)
	for b.Loop() {
		b.StopTimer()
		c := startChild(b, "hub", []string{"laptop"})
		h := newBenchHost(b, "laptop")
		h.submit(b, cs)
		_, base := c.memory(b)
		b.StartTimer()
		t0 := time.Now()
		h.startPublisher(b, c.url)
		h.caughtUp(b)
		b.StopTimer()
		el := time.Since(t0)
		st := h.pub.Conn().Stats()
		n := float64(len(cs))
		b.ReportMetric(n/el.Seconds(), "records/s")
		b.ReportMetric(float64(st.OutBytes)/n, "wirebytes/record")
		b.ReportMetric(float64(st.OutBytes)/1e6, "wire-MB")
		c.reportMemory(b, "hub")
		b.ReportMetric(base/1e6, "hub-idle-MB")
		b.ReportMetric(diskBytes(b, c.dir)/n, "hub-diskbytes/record")
		h.stopPublisher()
		c.stop(b)
		b.ReportMetric(diskBytes(b, filepath.Join(c.dir, "view.db"))/n, "view-diskbytes/record")
		b.StartTimer()
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkHubScale: ANNEXD_BENCH_HUB_HOSTS hosts (default 10) holding
// ANNEXD_BENCH_HUB_RECORDS records in all (default 100,000; half of each
// host's contents shared among all), resent to a hub in another process;
// then whereis latency, and one host's catch-up after
// ANNEXD_BENCH_HUB_CHANGES changes made offline (default 10,000).
func BenchmarkHubScale(b *testing.B) {
	nHosts := envInt("ANNEXD_BENCH_HUB_HOSTS", 10)
	total := envInt("ANNEXD_BENCH_HUB_RECORDS", 100000)
	changes := envInt("ANNEXD_BENCH_HUB_CHANGES", 10000)
	per := total / nHosts
	for b.Loop() {
		b.StopTimer()
		var names []string
		for i := range nHosts {
			names = append(names, fmt.Sprintf("host%02d", i))
		}
		c := startChild(b, "hub", names)
		hosts := make([]*benchHost, nHosts)
		for i, name := range names {
			hosts[i] = newBenchHost(b, name)
			hosts[i].submit(b, synthetic(i+1, per, per/2))
		}
		b.StartTimer()
		t0 := time.Now()
		for _, h := range hosts {
			h.startPublisher(b, c.url)
		}
		for _, h := range hosts {
			h.caughtUp(b)
		}
		b.StopTimer()
		el := time.Since(t0)
		n := float64(per * nHosts)
		b.ReportMetric(n/el.Seconds(), "records/s")
		c.reportMemory(b, "hub")
		b.ReportMetric(diskBytes(b, c.dir)/n, "hub-diskbytes/record")
		b.ReportMetric(diskBytes(b, filepath.Join(c.dir, "view.db"))/n, "view-diskbytes/record")
		p50, p99 := whereisLatency(b, hosts[0], synthetic(1, per, per/2))
		b.ReportMetric(float64(p50.Microseconds()), "whereis-p50-µs")
		b.ReportMetric(float64(p99.Microseconds()), "whereis-p99-µs")
		rate := catchUp(b, hosts[len(hosts)-1], c.url, per, changes)
		b.ReportMetric(rate, "catchup-changes/s")
		b.StartTimer()
	}
}

// whereisLatency asks the hub about 2,000 digests of h's records cs.
func whereisLatency(b *testing.B, h *benchHost, cs []store.Change) (p50, p99 time.Duration) {
	cl := hub.NewClient(h.pub.Conn(), h.name)
	rng := rand.New(rand.NewPCG(9, 9))
	var lat []time.Duration
	for range 2000 {
		d := cs[rng.IntN(len(cs))].Record.Digest
		t0 := time.Now()
		got, err := cl.Whereis(context.Background(), "SHA256", hex.EncodeToString(d), -1)
		if err != nil {
			b.Fatal(err)
		}
		if len(got.Holders) == 0 {
			b.Fatalf("whereis %x: nobody", d)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100]
}

// catchUp takes h offline, makes changes (a third rewrites, a third new
// files, a third deletions) and times the hub catching up.
func catchUp(b *testing.B, h *benchHost, url string, per, n int) float64 {
	h.stopPublisher()
	rng := rand.New(rand.NewPCG(5, 5))
	var cs []store.Change
	for i := range n {
		switch i % 3 {
		case 0:
			d := sha256.Sum256(binary.AppendUvarint(nil, uint64(1<<50+i)))
			cs = append(cs, store.Change{Op: store.OpPut, Path: synthPath(rng.IntN(per)), Record: record(d[:], 4242, uint64(1<<30+i))})
		case 1:
			d := sha256.Sum256(binary.AppendUvarint(nil, uint64(1<<51+i)))
			cs = append(cs, store.Change{Op: store.OpPut, Path: []byte(fmt.Sprintf("/home/u/new/f%07d", i)), Record: record(d[:], 99, uint64(1<<31+i))})
		case 2:
			cs = append(cs, store.Change{Op: store.OpDelete, Path: synthPath(rng.IntN(per))})
		}
	}
	before, _ := h.st.ChangeLog()
	h.submit(b, cs)
	t0 := time.Now()
	h.startPublisher(b, url)
	h.caughtUp(b)
	el := time.Since(t0)
	after, _ := h.st.ChangeLog()
	if h.pub.Status().Resends != 0 {
		b.Fatalf("catch-up resent the index whole")
	}
	logged := after.Seq - before.Seq
	b.Logf("catch-up: %d changes made, %d logged (net of repeats), in %s", n, logged, el)
	return float64(logged) / el.Seconds()
}

// BenchmarkViewKV puts ANNEXD_BENCH_KV_RECORDS (default 100,000) records
// into a JetStream key-value bucket, one key per host and path, as the
// other place the view could live: the server's memory and disk per
// record.
func BenchmarkViewKV(b *testing.B) {
	n := envInt("ANNEXD_BENCH_KV_RECORDS", 100000)
	for b.Loop() {
		b.StopTimer()
		c := startChild(b, "kv", nil)
		nc, err := nats.Connect(c.url)
		if err != nil {
			b.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		ctx := context.Background()
		kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "view", Storage: jetstream.FileStorage})
		if err != nil {
			b.Fatal(err)
		}
		_, base := c.memory(b)
		cs := synthetic(1, n, 0)
		b.StartTimer()
		t0 := time.Now()
		futures := make([]jetstream.PubAckFuture, 0, 1024) // below the client's 4,000 outstanding
		for i, ch := range cs {
			ph := sha256.Sum256(ch.Path)
			k := "h01." + hex.EncodeToString(ph[:12])
			v := append(append([]byte{byte(key.SHA256)}, ch.Record.Digest...), ch.Path...)
			f, err := js.PublishAsync("$KV.view."+k, v)
			if err != nil {
				b.Fatal(err)
			}
			futures = append(futures, f)
			if len(futures) == cap(futures) || i == len(cs)-1 {
				for _, f := range futures {
					select {
					case <-f.Ok():
					case err := <-f.Err():
						b.Fatal(err)
					}
				}
				futures = futures[:0]
			}
		}
		b.StopTimer()
		_ = kv
		el := time.Since(t0)
		b.ReportMetric(float64(n)/el.Seconds(), "records/s")
		c.reportMemory(b, "server")
		b.ReportMetric(base/1e6, "server-idle-MB")
		nc.Close()
		c.stop(b)
		b.ReportMetric(diskBytes(b, c.dir)/float64(n), "diskbytes/record")
		b.StartTimer()
	}
}

// BenchmarkPublishCluster: one host resends the corpus's records to one
// hub, then to a cluster of three, all in this process over loopback TCP
// in one run: records/s of each, and the cluster's share of the hub's.
func BenchmarkPublishCluster(b *testing.B) {
	cs, src := corpusChanges(b)
	b.Logf("%d records from %s", len(cs), src)
	for b.Loop() {
		one := publishRate(b, cs, 1)
		three := publishRate(b, cs, 3)
		b.ReportMetric(one, "hub-records/s")
		b.ReportMetric(three, "cluster3-records/s")
		b.ReportMetric(three/one, "cluster/hub")
	}
}

// BenchmarkClusterStart: a new cluster of three nodes in this process,
// until every node answers: its stream, buckets and consumers each wait
// for their first leaders (the seconds a fresh cluster stays silent).
func BenchmarkClusterStart(b *testing.B) {
	for b.Loop() {
		nodes := benchNodes(b, 3)
		t0 := time.Now()
		startAll(b, nodes...)
		b.ReportMetric(time.Since(t0).Seconds(), "s/start")
		for _, nd := range nodes {
			nd.halt(b)
		}
	}
}

// publishRate resends cs to n hub nodes (one: no cluster) and returns
// the records applied a second, counted until the host's last ack.
func publishRate(b *testing.B, cs []store.Change, n int) float64 {
	b.StopTimer()
	defer b.StartTimer()
	nodes := benchNodes(b, n)
	var urls []string
	for _, nd := range nodes {
		urls = append(urls, nd.cfg.Listen)
	}
	startAll(b, nodes...)
	defer func() {
		for _, nd := range nodes {
			nd.halt(b)
		}
	}()
	h := newBenchHost(b, "laptop")
	h.submit(b, cs)
	t0 := time.Now()
	h.startPublisher(b, "nats://"+strings.Join(urls, ",nats://"))
	h.caughtUp(b)
	el := time.Since(t0)
	h.stopPublisher()
	return float64(len(cs)) / el.Seconds()
}

// benchNodes configures n hub nodes on loopback (one: no cluster) with
// "laptop" as their host.
func benchNodes(b *testing.B, n int) []*node {
	hash, err := bcrypt.GenerateFromPassword([]byte(benchPass), bcrypt.MinCost)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	var names, routes, urls []string
	for i := range n {
		names = append(names, fmt.Sprintf("nas%d", i+1))
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", freePort(b)))
		urls = append(urls, fmt.Sprintf("127.0.0.1:%d", freePort(b)))
	}
	var nodes []*node
	for i := range n {
		cfg := hub.Config{Listen: urls[i], Dir: filepath.Join(dir, names[i]), Self: names[i],
			Hosts: []hub.Host{{Name: "laptop", Password: string(hash)}}, MaxStreamBytes: 4 << 30}
		if n > 1 {
			cfg.Cluster = &hub.Cluster{Name: "bench", Listen: strings.TrimPrefix(routes[i], "nats-route://"),
				Routes: routes, Nodes: names, Secret: "bench-route"}
		}
		nodes = append(nodes, &node{cfg: cfg})
	}
	return nodes
}
