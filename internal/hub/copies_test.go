package hub_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/internal/loopfs"
)

// TestCopiesCountsHostsNotTwins: a host holding one content as two
// reflinked twins (one physical copy, on an XFS image) holds one copy:
// copies --fewer-than 2 lists it, as it lists content on one host with
// one name, and not content that a second host holds too. The hub counts
// hosts, so no twin, hard link or plain second copy on one host counts
// as another.
func TestCopiesCountsHostsNotTwins(t *testing.T) {
	c := newCluster(t)
	nas, laptop := c.addHost("nas"), c.addHost("laptop")
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: loopfs.MinSize[loopfs.XFS]})
	nas.root = fs.Path("tree")
	nas.write(t, map[string]string{"twins/a.raw": "the twins' content", "both.txt": "on both hosts"})
	twin(t, filepath.Join(nas.root, "twins/a.raw"), filepath.Join(nas.root, "twins/b.raw"))
	laptop.write(t, map[string]string{"both.txt": "on both hosts"})
	for _, h := range []*host{nas, laptop} {
		h.index(t, c)
		h.caughtUp(t)
	}
	cl := c.client(t, "laptop")
	for _, req := range []hubwire.CopiesRequest{{FewerThan: 2}, {FewerThan: 2, Host: "nas"}} {
		r, err := cl.Copies(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Items) != 1 || r.Items[0].Digest != sha256Hex("the twins' content") {
			t.Fatalf("copies %+v: %+v, want the twins' content alone", req, r.Items)
		}
		hs := r.Items[0].Holders
		if len(hs) != 1 || hs[0].Host != "nas" || hs[0].Count != 2 {
			t.Errorf("copies %+v: holders %+v, want nas with its two names", req, hs)
		}
	}
}

func sha256Hex(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

// twin makes dst a reflink of src (FICLONE), as cp --reflink does.
func twin(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err != nil {
		t.Fatalf("FICLONE %s: %v", dst, err)
	}
}
