package e2e

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/loopfs"
)

// The audit reads the device, not the page cache. 120 files are indexed
// and read, so the page cache holds them; then 12 get a byte flipped in
// the image under their cached pages, as a disk rots under RAM. A buffered
// read still returns the old bytes, a direct one the flip. The run finds
// all 12 corrupt and exits 4; the other files' cached pages stay cached.
func TestAuditReadsTheDevice(t *testing.T) {
	t.Parallel()
	for _, kind := range []loopfs.Kind{loopfs.Ext4, loopfs.XFS} {
		t.Run(string(kind), func(t *testing.T) { auditReadsTheDevice(t, kind) })
	}
}

func auditReadsTheDevice(t *testing.T, kind loopfs.Kind) {
	fs := loopfs.New(t, kind, loopfs.Options{Size: max(loopfs.MinSize[kind], 64<<20)})
	root := fs.Path("home")
	var paths []string
	sizes := map[string]int{}
	for i := range 120 {
		p := filepath.Join(root, fmt.Sprintf("d%d", i%7), fmt.Sprintf("f%03d.bin", i))
		sizes[p] = 1 + (i*7919)%(160<<10) // sizes that are no multiple of a block, one of 1 byte
		writeAged(t, p, uint64(300+i), sizes[p])
		paths = append(paths, p)
	}
	d := startOn(t, dedupBase(t, auditConf), root)
	fs.Sync(t)
	sums := map[string][32]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p) // cached now
		if err != nil {
			t.Fatal(err)
		}
		sums[p] = sha256.Sum256(b)
	}
	var victims []string
	for i := 5; i < len(paths); i += 10 {
		p := paths[i]
		_, extent := loopfs.Physical(t, p)
		fs.FlipByteUnderCache(t, p, min(int64(sizes[p])/2, extent-1))
		victims = append(victims, p)
	}
	// The flip is under the cache: buffered reads see the old bytes, a
	// direct read the new ones.
	for _, p := range victims {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(b) != sums[p] {
			t.Fatalf("%s: a buffered read sees the flip: the page cache did not keep the old bytes", p)
		}
		if directSum(t, p) == sums[p] {
			t.Fatalf("%s: a direct read does not see the flip", p)
		}
	}

	// Touch every file's pages again just before the run: a machine that
	// pages out what nobody read for a minute (DAMON's pageout here, with
	// an age of 60 s) would otherwise drop some while a loaded test gets
	// here, and the count after the run would blame the audit.
	for _, p := range paths {
		if _, err := os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	r := d.ctl("", "audit", "run", "--wait", "--full-speed")
	if r.code != 4 || !strings.Contains(r.stdout, "corrupt     12") {
		t.Fatalf("audit run: exit %d, want 4 with 12 corrupt\n%s%s\n%s", r.code, r.stdout, r.stderr, d.log)
	}
	var flagged []string
	for _, p := range auditProblems(t, d) {
		if p["state"] != "corrupt" {
			t.Errorf("problem %v", p)
		}
		flagged = append(flagged, p["path"].(string))
	}
	slices.Sort(flagged)
	slices.Sort(victims)
	if !slices.Equal(flagged, victims) {
		t.Fatalf("flagged %v, want %v", flagged, victims)
	}
	st := auditStatus(t, d)
	if st.Totals["ok"] != 108 || st.Totals["corrupt"] != 12 || len(st.CacheOnly.Files) != 0 {
		t.Errorf("status after the run: totals %v, cache only %+v", st.Totals, st.CacheOnly)
	}
	pages := func(p string) int64 { return (int64(sizes[p]) + 4095) / 4096 }
	var lost []string
	for _, p := range paths {
		if cachedPages(t, p) != pages(p) {
			lost = append(lost, p)
		}
	}
	if len(lost) == 0 {
		return
	}
	// DAMON pages out by regions, and a region it finds cold can hold
	// pages read seconds before: the likely cause of a run beside heavy
	// load that found 24 of a file's 26 pages (a file of 100 KB, not one
	// for the lanes). Whether the audit dropped them: cache them again and
	// audit those files alone. An audit that drops what it reads drops it
	// again (checked with a Fadvise DONTNEED put in readDirect); the
	// machine's pageout seldom hits the same files twice.
	t.Logf("%d files lost cached pages during the run; auditing them again alone", len(lost))
	for _, p := range lost {
		if _, err := os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	_, run := auditRun(t, d, append([]string{"--full-speed"}, lost...)...)
	checked := 0
	for _, n := range run.Counts {
		checked += int(n)
	}
	if checked != len(lost) {
		t.Fatalf("the run again over %d files checked %d: %+v", len(lost), checked, run)
	}
	for _, p := range lost {
		if n := cachedPages(t, p); n != pages(p) {
			t.Errorf("%s: %d pages cached after the audit, want all %d: the audit changed the page cache", p, n, pages(p))
		}
	}
}

// A root on a tmpfs has no device to verify: its files are read from the
// page cache, which is where they live. The run verifies them and says
// so, in its summary, in audit status, in its JSON and in the metrics;
// none is counted as read from a device.
func TestAuditNoDeviceTmpfs(t *testing.T) {
	t.Parallel()
	needRoot(t, "mount a tmpfs")
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	root := filepath.Join(dir, "home")
	const files = 10
	for i := range files {
		writeAged(t, filepath.Join(root, fmt.Sprintf("f%d", i)), uint64(400+i), 5000+i*4096)
	}
	d := startOn(t, dedupBase(t, auditConf), root)

	r := d.ctl("", "audit", "run", "--wait", "--full-speed")
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("%d files not verifiable from a device", files)) ||
		!strings.Contains(r.stdout, "tmpfs") {
		t.Fatalf("audit run: exit %d\n%s%s\n%s", r.code, r.stdout, r.stderr, d.log)
	}
	code, run := auditRun(t, d, "--full-speed")
	if code != 0 || run.Counts["ok"] != files || run.CacheOnly.Files[api.AuditNoDevice] != files || run.CacheOnly.Bytes == 0 {
		t.Fatalf("audit run --json: exit %d, %+v", code, run)
	}
	st := auditStatus(t, d)
	if st.CacheOnly.Files[api.AuditNoDevice] != 2*files || st.CacheOnly.Bytes != 2*run.CacheOnly.Bytes {
		t.Fatalf("status: cache only %+v after two runs of %d files", st.CacheOnly, files)
	}
	if r := d.ctl("", "audit", "status"); !strings.Contains(r.stdout, "not verifiable from a device") {
		t.Errorf("audit status:\n%s", r.stdout)
	}
	if n := metric(t, d, `annexd_audit_cache_only_files_total{why="no_device"}`); n != 2*files {
		t.Errorf("annexd_audit_cache_only_files_total{why=\"no_device\"} = %v", n)
	}
}

// directSum is the SHA-256 of the file at path read with O_DIRECT.
func directSum(t *testing.T, path string) [32]byte {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	n := (int(st.Size) + 4095) &^ 4095
	raw := make([]byte, n+4096)
	skip := (4096 - int(uintptr(unsafe.Pointer(&raw[0]))%4096)) % 4096
	buf := raw[skip : skip+n]
	got := 0
	for got < int(st.Size) {
		m, err := unix.Pread(fd, buf[got:], int64(got))
		if err != nil || m == 0 {
			t.Fatalf("direct read of %s: %d bytes, %v", path, m, err)
		}
		got += m
	}
	return sha256.Sum256(buf[:st.Size])
}

// cachedPages is how many pages of path the page cache holds.
func cachedPages(t *testing.T, path string) int64 {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var cs unix.Cachestat_t
	if err := unix.Cachestat(uint(fd), &unix.CachestatRange{}, &cs, 0); err != nil {
		t.Fatalf("cachestat %s: %v", path, err)
	}
	return int64(cs.Cache)
}
