package hub

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/internal/hubwire"
)

// Claims are judged by the stream's timestamps alone: the view's clock
// (here an hour behind the stream's) plays no part. The holder's claims
// and batches renew its lease; another instance takes the name only
// once the holder said nothing for the lease, and hears once whom it
// took it from.
func TestClaimsAreJudgedByStreamTime(t *testing.T) {
	v, _ := openTestView(t)
	const a, b = 0xa, 0xb
	t0 := time.Unix(1_800_003_600, 0)
	judge := func(inst uint64, at time.Time, want bool) {
		t.Helper()
		got, err := v.judge("laptop", inst, at, at.String())
		if err != nil || got != want {
			t.Fatalf("claim of %x at +%s: holds %v (%v), want %v", inst, at.Sub(t0), got, err, want)
		}
	}
	judge(a, t0, true) // the name was free
	if st := v.answer("laptop", a, t0.String()); st.Instance != a || st.Previous != 0 {
		t.Fatalf("answer to the first holder: %+v", st)
	}
	judge(b, t0.Add(v.lease-time.Second), false)
	if st := v.state("laptop"); st.Rival.IsZero() {
		t.Fatal("the refused claim is not noted as a rival's")
	}
	// A batch of the holder renews its lease, one of the other is not its.
	t1 := t0.Add(v.lease - time.Millisecond)
	if _, err := v.applyFrom("laptop", &hubwire.Batch{Kind: hubwire.SnapBegin, Epoch: 1}, a, t1); err != nil {
		t.Fatal(err)
	}
	if v.fromHolder("laptop", b) {
		t.Fatal("a batch of the other instance taken for the holder's")
	}
	judge(b, t1.Add(v.lease), false)
	took := t1.Add(v.lease + time.Millisecond)
	judge(b, took, true)
	if st := v.answer("laptop", b, ""); st.Instance != b || st.Previous != 0 {
		t.Fatalf("the takeover told to another request than the claim's: %+v", st)
	}
	if st := v.answer("laptop", b, took.String()); st.Instance != b || st.Previous != a {
		t.Fatalf("answer to the claim that took the name: %+v, want previous %x", st, a)
	}
	if st := v.answer("laptop", b, took.String()); st.Previous != 0 {
		t.Fatalf("the takeover told twice: %+v", st)
	}
	judge(a, t1.Add(v.lease+time.Second), false) // the old holder back is the rival now
}

// A holder from before claims in the stream has no stream time: the
// first claim of another instance starts its lease, alike on every node
// (each node's last-seen time is its own).
func TestAHolderFromBeforeStreamClaims(t *testing.T) {
	v, clk := openTestView(t)
	err := v.update(func(_ *bolt.Tx, get func(string) (*hostRec, error)) error {
		h, err := get("laptop")
		h.Instance, h.LastSeen = 0xa, clk.now()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	at := clk.now().Add(time.Hour)
	for i, c := range []struct {
		after time.Duration
		holds bool
	}{{0, false}, {v.lease, false}, {v.lease + time.Millisecond, true}} {
		if holds, err := v.judge("laptop", 0xb, at.Add(c.after), fmt.Sprint(i)); err != nil || holds != c.holds {
			t.Fatalf("claim %s after the first: holds %v (%v), want %v", c.after, holds, err, c.holds)
		}
	}
}

// An answer waits for the claim its request made; one judged before the
// wait began does not hold it up.
func TestAwaitAClaim(t *testing.T) {
	v, clk := openTestView(t)
	early := v.await("x")
	if _, err := v.judge("laptop", 0xa, clk.now(), "x"); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []chan struct{}{early, v.await("x")} {
		select {
		case <-ch:
		case <-time.After(time.Second):
			t.Fatal("the wait for a judged claim did not end")
		}
	}
	select {
	case <-v.await("y"):
		t.Fatal("the wait for a claim not judged ended")
	default:
	}
	v.forget("y")
}

// A single hub keeps its claim key through restarts, and refuses a key
// file that is not one rather than replace it unsaid.
func TestClaimKeyIsKept(t *testing.T) {
	c := Config{Dir: filepath.Join(t.TempDir(), "hub")}
	k1, err := c.claimKey()
	if err != nil || len(k1) != 32 {
		t.Fatalf("first key: %x %v", k1, err)
	}
	if k2, err := c.claimKey(); err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("the key after a restart: %x %v, want %x", k2, err, k1)
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "claim.key"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.claimKey(); err == nil || !strings.Contains(err.Error(), "remove it") {
		t.Fatalf("an empty key file: %v, want an error saying to remove it", err)
	}
}
