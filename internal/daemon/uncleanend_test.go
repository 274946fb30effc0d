package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// Environment of the child that writes a record and dies.
const (
	lostWriteIndex = "ANNEXD_DAEMON_TEST_LOST_WRITE_INDEX"
	lostWriteFile  = "ANNEXD_DAEMON_TEST_LOST_WRITE_FILE"
)

func TestMain(m *testing.M) {
	if index := os.Getenv(lostWriteIndex); index != "" {
		os.Exit(recordLostWrite(index, os.Getenv(lostWriteFile)))
	}
	os.Exit(m.Run())
}

// recordLostWrite is what a daemon that hashed a rewrite from the page
// cache leaves when the power goes: a committed record whose identity is
// the file's and whose digest is of bytes the disk does not hold ("lost
// bytes" here), and no clean shutdown. It exits without closing the index.
func recordLostWrite(index, path string) int {
	st, err := store.Open(index, store.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	go st.Run(context.Background())
	fi, err := fsstat.Lstat(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	lost := sha256.Sum256([]byte("lost bytes"))
	now := time.Now().UnixNano()
	rec := store.Record{
		Backend: key.SHA256E, Digest: lost[:], Size: fi.Size, MtimeNs: fi.MtimeNs, CtimeNs: fi.CtimeNs,
		Dev: fi.Dev, Ino: fi.Ino, HashedAt: now, VerifiedAt: now, State: store.StateOK,
	}
	if err := st.Put(context.Background(), []byte(path), rec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	return 0
}

// After a run that ended without closing the index, and the end of the
// mount of its files' file system (a power cut, a disk pulled out), a
// record hashed just before its end is hashed again even though the
// file's stat identity still matches it (hashed a tick after its ctime,
// so not racily clean): the daemon reports the key of the bytes on disk,
// not the recorded one, and the audit lists the lost write with both
// digests.
func TestUncleanEndReverifiesTheLastRecords(t *testing.T) {
	disk := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: loopfs.MinSize[loopfs.Ext4]})
	root := disk.Path("root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "f.txt")
	writeOld(t, path, "disk bytes") // as long as "lost bytes"
	time.Sleep(fsstat.FineGranularity + 10*time.Millisecond)
	cfg := testConfig(t, root)
	if err := os.MkdirAll(filepath.Dir(cfg.Index), 0o700); err != nil {
		t.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), lostWriteIndex+"="+cfg.Index, lostWriteFile+"="+path)
	if out, err := child.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	disk.Unmount(t) // the mount ends: what the page cache held is gone
	disk.Mount(t)

	_, end := runApp(t, cfg, nil)
	defer func() {
		if err := end(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	ctx := context.Background()
	c := api.Dial(cfg.Socket)
	defer c.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st, err := c.Status(ctx); err == nil && st.Idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not become idle in 30 s")
		}
	}
	r, err := c.Lookup(ctx, []byte(path), false)
	want := sha256.Sum256([]byte("disk bytes"))
	if err != nil || r.State != api.StateCurrent || r.Key.String() != mustKey(t, want[:], 10, path) {
		t.Fatalf("lookup after the unclean end: %+v %v; want the key of the bytes on disk", r, err)
	}
	lost := sha256.Sum256([]byte("lost bytes"))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var ps []api.AuditProblem
		if err := c.AuditProblems(ctx, func(p api.AuditProblem) error { ps = append(ps, p); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(ps) == 1 {
			p := ps[0]
			if string(p.Path) != path || p.State != "lost_write" || !bytes.Equal(p.Recorded, lost[:]) || !bytes.Equal(p.Observed, want[:]) {
				t.Fatalf("problem %+v", p)
			}
			break
		}
		if len(ps) > 1 || time.Now().After(deadline) {
			t.Fatalf("problems %+v; want the lost write", ps)
		}
	}
	if st, err := c.AuditStatus(ctx); err != nil || st.Problems != 1 {
		t.Errorf("audit status %+v, %v", st, err)
	}
}

func mustKey(t *testing.T, digest []byte, size int64, path string) string {
	t.Helper()
	k, err := key.FromDigest(key.SHA256E, digest, size, filepath.Base(path), key.ExtRule{})
	if err != nil {
		t.Fatal(err)
	}
	return k.String()
}
