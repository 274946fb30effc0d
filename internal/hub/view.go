package hub

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store/codec"
)

// Buckets of the view. A content key (ck) is backend ‖ digest ‖ size(8):
// see contentKey.
var (
	bucketMeta    = []byte("meta")     // "version" → the layout's number
	bucketHosts   = []byte("hosts")    // name → hostRec (JSON)
	bucketFiles   = []byte("files")    // num(4) ‖ path → backend ‖ digest ‖ uvarint(size) ‖ uvarint(tag)
	bucketDigest  = []byte("bydigest") // ck ‖ num(4) ‖ path → ∅
	bucketDigests = []byte("digests")  // ck → uvarint(size) uvarint(paths) uvarint(hosts)
	bucketXDups   = []byte("xdups")    // ^size(8) ‖ backend ‖ digest → ∅, for content on ≥ 2 hosts
	viewBuckets   = [][]byte{bucketMeta, bucketHosts, bucketFiles, bucketDigest, bucketDigests, bucketXDups}
	// derivedBuckets are rebuilt from files when the layout changes.
	derivedBuckets = [][]byte{bucketDigest, bucketDigests, bucketXDups}
)

// viewVersion is the layout of the view. Version 1 (no meta bucket)
// grouped records by digest alone, so one host's claim of a digest with
// another size changed what every holder's records answered.
const viewVersion = 2

// sweepChunk bounds the records one transaction of a sweep removes.
const sweepChunk = 8192

// hostRec is what the view keeps of one host.
type hostRec struct {
	Num      uint32    `json:"num"`
	Name     string    `json:"name"`
	HostID   string    `json:"host_id,omitempty"`
	IndexID  [16]byte  `json:"index_id"`
	Epoch    uint64    `json:"epoch"`
	Seq      uint64    `json:"seq"`
	Complete bool      `json:"complete"`
	Gap      bool      `json:"gap,omitempty"`
	Tag      uint64    `json:"tag"` // marks the records of the current resend
	Tags     uint64    `json:"tags"`
	Pending  *pending  `json:"pending,omitempty"`
	LastSeen time.Time `json:"last_seen"`
	Records  int64     `json:"records"`
	Bytes    int64     `json:"bytes"`
	Instance uint64    `json:"instance,omitempty"` // the publisher that holds the name (claim.go)
	// Stamp is the stream's time of the holder's last claim or batch.
	Stamp time.Time `json:"stamp,omitzero"`
	// Chain is the chain of IndexID through Seq (hubwire's chain.go);
	// none for a host completed by an older version and not resent since.
	Chain hubwire.Chain `json:"chain,omitzero"`
}

// pending is a whole resend under way.
type pending struct {
	IndexID [16]byte `json:"index_id"`
	Epoch   uint64   `json:"epoch"`
	Next    uint64   `json:"next"` // the chunk expected next
	Tag     uint64   `json:"tag"`
	Broken  bool     `json:"broken,omitempty"`
}

func (h *hostRec) numKey() []byte { return binary.BigEndian.AppendUint32(nil, h.Num) }

// view is the hub's materialised index: every host's paths and what they
// hold, by host and path and by content. One goroutine applies batches;
// queries read in their own transactions. Only the hosts in known have
// records: the view refuses others and removes, when it opens, those no
// longer known.
type view struct {
	db    *bolt.DB
	stale time.Duration
	now   func() time.Time
	known map[string]bool
	log   *slog.Logger

	mu    sync.Mutex
	hosts map[string]*hostRec // committed state, by name
	byNum map[uint32]string
	seen  map[string]time.Time // heard from since the last flush
	// rivals is when another publisher than the holder last spoke as
	// each host (claim.go).
	rivals map[string]time.Time
	lease  time.Duration // how long a holder keeps a name (claim.go)
	claims claims
}

// viewConfig is what a view needs besides its file.
type viewConfig struct {
	stale time.Duration
	now   func() time.Time
	known map[string]bool // the configured hosts
	log   *slog.Logger
	lease time.Duration // default defaultClaimLease
}

// openView opens the view at path, brings an older layout up to date and
// removes the hosts that cfg.known no longer names.
func openView(path string, cfg viewConfig) (*view, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("hub: view directory: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, FreelistType: bolt.FreelistMapType, NoStatistics: true})
	if err != nil {
		return nil, fmt.Errorf("hub: open view %s: %w", path, err)
	}
	v := &view{db: db, stale: cfg.stale, now: cfg.now, known: cfg.known, log: cfg.log,
		hosts: map[string]*hostRec{}, byNum: map[uint32]string{}, seen: map[string]time.Time{}, rivals: map[string]time.Time{},
		lease: cfg.lease, claims: newClaims()}
	if v.log == nil {
		v.log = slog.New(slog.DiscardHandler)
	}
	if v.lease <= 0 {
		v.lease = defaultClaimLease
	}
	var version uint64
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range viewBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		version = readVersion(tx)
		return tx.Bucket(bucketHosts).ForEach(func(k, val []byte) error {
			h := &hostRec{}
			if err := json.Unmarshal(val, h); err != nil {
				return fmt.Errorf("host %q: %w", k, err)
			}
			v.hosts[h.Name], v.byNum[h.Num] = h, h.Name
			return nil
		})
	})
	if err == nil && version != viewVersion {
		err = v.upgrade(version)
	}
	if err == nil {
		err = v.prune()
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("hub: open view %s: %w", path, err)
	}
	return v, nil
}

// errUnknownHost: a name the hub's configuration does not list.
var errUnknownHost = errors.New("hub: no such host in the configuration")

func (v *view) close() error { return v.db.Close() }

// heard notes that a host spoke; flush makes it durable. A name the
// configuration does not list is not noted.
func (v *view) heard(name string) {
	if !v.known[name] {
		return
	}
	v.mu.Lock()
	v.seen[name] = v.now()
	v.mu.Unlock()
}

// flushSeen writes the last-seen times noted since the last flush.
func (v *view) flushSeen() error {
	v.mu.Lock()
	seen := v.seen
	v.seen = map[string]time.Time{}
	v.mu.Unlock()
	if len(seen) == 0 {
		return nil
	}
	return v.update(func(tx *bolt.Tx, get func(string) (*hostRec, error)) error {
		for name, t := range seen {
			h, err := get(name)
			if err != nil {
				return err
			}
			if t.After(h.LastSeen) {
				h.LastSeen = t
			}
		}
		return nil
	})
}

// update runs fn in a write transaction on copies of the host records it
// asks for, and publishes them once the transaction committed.
func (v *view) update(fn func(tx *bolt.Tx, get func(string) (*hostRec, error)) error) error {
	touched := map[string]*hostRec{}
	err := v.db.Update(func(tx *bolt.Tx) error {
		get := func(name string) (*hostRec, error) {
			if h, ok := touched[name]; ok {
				return h, nil
			}
			h, err := v.hostCopy(tx, name)
			if err == nil {
				touched[name] = h
			}
			return h, err
		}
		if err := fn(tx, get); err != nil {
			return err
		}
		for _, h := range touched {
			b, err := json.Marshal(h)
			if err != nil {
				return err
			}
			if err := tx.Bucket(bucketHosts).Put([]byte(h.Name), b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	v.mu.Lock()
	for name, h := range touched {
		v.hosts[name], v.byNum[h.Num] = h, name
	}
	v.mu.Unlock()
	return nil
}

// hostCopy returns a copy of the host named name, numbering a new one
// when the configuration lists it.
func (v *view) hostCopy(tx *bolt.Tx, name string) (*hostRec, error) {
	if !v.known[name] {
		return nil, fmt.Errorf("%w: %q", errUnknownHost, name)
	}
	v.mu.Lock()
	h, ok := v.hosts[name]
	v.mu.Unlock()
	if ok {
		c := *h
		if h.Pending != nil {
			p := *h.Pending
			c.Pending = &p
		}
		return &c, nil
	}
	n, err := tx.Bucket(bucketHosts).NextSequence()
	if err != nil {
		return nil, err
	}
	if n > 1<<32-1 {
		return nil, errors.New("hub: host numbers exhausted")
	}
	return &hostRec{Num: uint32(n), Name: name}, nil
}

// applyResult says what applying a batch changed, for the ack.
type applyResult struct {
	state hubwire.State
	note  string // why a batch was not applied, empty when it was
}

// apply applies one batch from host name.
func (v *view) apply(name string, b *hubwire.Batch) (applyResult, error) {
	return v.applyFrom(name, b, 0, time.Time{})
}

// applyFrom applies one batch from publisher inst of host name, which the
// stream took at stream time at: a batch of the holder renews its lease.
func (v *view) applyFrom(name string, b *hubwire.Batch, inst uint64, at time.Time) (applyResult, error) {
	var res applyResult
	sweep := false
	err := v.update(func(tx *bolt.Tx, get func(string) (*hostRec, error)) error {
		h, err := get(name)
		if err != nil {
			return err
		}
		h.HostID, h.LastSeen = hubwire.UUIDString(b.HostID), v.now()
		if inst != 0 && h.Instance == inst && !at.IsZero() {
			h.Stamp = at
		}
		w := newVtx(tx, h)
		res.note, sweep, err = w.apply(b)
		w.setFill()
		return err
	})
	for err == nil && sweep {
		sweep, err = v.sweep(name, b)
	}
	if err != nil {
		return res, err
	}
	res.state = v.state(name)
	return res, nil
}

// sweep removes, a chunk per transaction, the host's records that the
// resend ending with b did not refresh, and completes it after the last.
func (v *view) sweep(name string, b *hubwire.Batch) (more bool, err error) {
	err = v.update(func(tx *bolt.Tx, get func(string) (*hostRec, error)) error {
		h, err := get(name)
		if err != nil {
			return err
		}
		p := h.Pending
		if p == nil || p.Epoch != b.Epoch {
			return nil // completed by an earlier delivery
		}
		w := newVtx(tx, h)
		n, err := w.sweepOld(p.Tag, sweepChunk)
		if err != nil || n == sweepChunk {
			more = true
			return err
		}
		h.IndexID, h.Epoch, h.Seq, h.Tag = p.IndexID, p.Epoch, b.Last, p.Tag
		h.Complete, h.Gap, h.Pending = true, false, nil
		h.Chain = hubwire.ChainStart(p.IndexID, p.Epoch, b.Last)
		return nil
	})
	return more, err
}

// vtx applies one batch inside a write transaction.
type vtx struct {
	tx *bolt.Tx
	h  *hostRec
	// last is the host's last file key when the transaction began; puts
	// and appended count the file keys put and those after it.
	last          []byte
	puts, appends int
}

// newVtx begins applying to host h in tx.
func newVtx(tx *bolt.Tx, h *hostRec) *vtx {
	w := &vtx{tx: tx, h: h}
	next := binary.BigEndian.AppendUint32(nil, h.Num+1)
	c := tx.Bucket(bucketFiles).Cursor()
	k, _ := c.Seek(next)
	if k == nil {
		k, _ = c.Last()
	} else {
		k, _ = c.Prev()
	}
	if k != nil && bytes.HasPrefix(k, h.numKey()) {
		w.last = bytes.Clone(k)
	}
	return w
}

// setFill fills the files pages completely when nearly every put landed
// after the host's last path, as a whole resend in path order does;
// bbolt's default of half-full pages suits scattered inserts.
func (w *vtx) setFill() {
	if w.puts > 0 && w.appends*10 >= w.puts*9 {
		w.tx.Bucket(bucketFiles).FillPercent = 1.0
	}
}

// apply returns why the batch was skipped (empty: applied) and whether a
// sweep must follow.
func (w *vtx) apply(b *hubwire.Batch) (skipped string, sweep bool, err error) {
	h := w.h
	switch b.Kind {
	case hubwire.Log:
		switch {
		case !h.Complete || b.IndexID != h.IndexID:
			return "log of an index the hub has not had whole", false, nil
		case h.Pending != nil && !h.Pending.Broken && h.Pending.IndexID != h.IndexID:
			// A host resends another index only once it left this one;
			// a log of it now is another machine's (a twin), and would
			// retag the resend's records for its sweep to remove.
			return "log of an index another resend replaces", false, nil
		case b.Last <= h.Seq:
			return "duplicate", false, nil
		case b.First > h.Seq:
			h.Gap = true
			return "gap", false, nil
		}
		applied := b.Entries[h.Seq-b.First:]
		if !b.Chain.IsZero() {
			c := b.Chain
			for i := range b.Entries[:h.Seq-b.First] {
				c = c.Next(&b.Entries[i])
			}
			switch {
			case h.Chain.IsZero():
				h.Chain = c // the first chained batch since a hub or host without chains
			case c != h.Chain:
				return NoteForeign, false, nil
			}
		}
		for i := range applied {
			if err := w.set(&applied[i], h.Tag); err != nil {
				return "", false, err
			}
			if !h.Chain.IsZero() {
				h.Chain = h.Chain.Next(&applied[i])
			}
		}
		h.Seq, h.Gap = b.Last, false
	case hubwire.SnapBegin:
		h.Tags++
		h.Pending = &pending{IndexID: b.IndexID, Epoch: b.Epoch, Next: 1, Tag: h.Tags}
	case hubwire.SnapChunk:
		p := h.Pending
		switch {
		case p == nil || p.Epoch != b.Epoch:
			return "chunk of no resend under way", false, nil
		case b.First < p.Next:
			return "duplicate", false, nil
		case b.First > p.Next:
			p.Broken = true
			return "gap", false, nil
		}
		for i := range b.Entries {
			if err := w.set(&b.Entries[i], p.Tag); err != nil {
				return "", false, err
			}
		}
		p.Next++
	case hubwire.SnapEnd:
		p := h.Pending
		if p == nil || p.Epoch != b.Epoch || p.Broken || b.First+1 != p.Next {
			if p != nil && p.Epoch == b.Epoch {
				p.Broken = true
			}
			return "end of no complete resend", false, nil
		}
		return "", true, nil
	default:
		return "unknown kind", false, nil
	}
	return "", false, nil
}

func (w *vtx) fileKey(path []byte) []byte { return append(w.h.numKey(), path...) }

// contentKey is what the view groups records by: base backend ‖ digest ‖
// size (8 bytes, big-endian), what a git-annex key names. The same digest
// claimed with another size is other content, so no host's claim changes
// what another host's records answer.
func contentKey(b key.Backend, d []byte, size int64) []byte {
	k := codec.DigestKey(make([]byte, 0, 1+len(d)+8), b, d)
	return binary.BigEndian.AppendUint64(k, uint64(size))
}

// contentSize is the size a content key names.
func contentSize(ck []byte) int64 { return int64(binary.BigEndian.Uint64(ck[len(ck)-8:])) }

// set makes the host's path hold e, tagged tag.
func (w *vtx) set(e *hubwire.Entry, tag uint64) error {
	files := w.tx.Bucket(bucketFiles)
	fk := w.fileKey(e.Path)
	if old := files.Get(fk); old != nil {
		ob, od, osize, otag, err := decodeFile(old)
		if err != nil {
			return err
		}
		if !e.Tombstone() && ob == e.Backend && bytes.Equal(od, e.Digest) && osize == e.Size {
			if otag == tag {
				return nil
			}
			return files.Put(fk, encodeFile(e.Backend, e.Digest, e.Size, tag))
		}
		if err := w.remove(fk, ob, od, osize); err != nil {
			return err
		}
	}
	if e.Tombstone() {
		return nil
	}
	return w.add(fk, e.Backend, e.Digest, e.Size, tag)
}

func encodeFile(b key.Backend, d []byte, size int64, tag uint64) []byte {
	v := append([]byte{byte(b)}, d...)
	v = binary.AppendUvarint(v, uint64(size))
	return binary.AppendUvarint(v, tag)
}

func decodeFile(v []byte) (key.Backend, []byte, int64, uint64, error) {
	if len(v) < 1 {
		return 0, nil, 0, 0, errors.New("hub: empty file value")
	}
	b := key.Backend(v[0])
	n := b.DigestLen()
	if !b.Valid() || len(v) < 1+n {
		return 0, nil, 0, 0, fmt.Errorf("hub: file value of backend %d", v[0])
	}
	d := v[1 : 1+n]
	size, k := binary.Uvarint(v[1+n:])
	tag, m := binary.Uvarint(v[1+n+max(k, 0):])
	if k <= 0 || m <= 0 || size > 1<<62 {
		return 0, nil, 0, 0, errors.New("hub: file value truncated")
	}
	return b, d, int64(size), tag, nil
}

func (w *vtx) add(fk []byte, b key.Backend, d []byte, size int64, tag uint64) error {
	w.puts++
	if w.last == nil || bytes.Compare(fk, w.last) > 0 {
		w.appends++
	}
	if err := w.tx.Bucket(bucketFiles).Put(fk, encodeFile(b, d, size, tag)); err != nil {
		return err
	}
	w.h.Records++
	w.h.Bytes += size
	return w.index(fk, contentKey(b, d, size))
}

// index adds file key fk to content ck's records and counts.
func (w *vtx) index(fk, ck []byte) error {
	had := w.holds(ck)
	if err := w.tx.Bucket(bucketDigest).Put(append(bytes.Clone(ck), fk...), nil); err != nil {
		return err
	}
	s := w.summary(ck)
	s.size, s.paths = contentSize(ck), s.paths+1
	if !had {
		s.hosts++
	}
	return w.setSummary(ck, s)
}

func (w *vtx) remove(fk []byte, b key.Backend, d []byte, size int64) error {
	ck := contentKey(b, d, size)
	if err := w.tx.Bucket(bucketFiles).Delete(fk); err != nil {
		return err
	}
	if err := w.tx.Bucket(bucketDigest).Delete(append(bytes.Clone(ck), fk...)); err != nil {
		return err
	}
	w.h.Records--
	w.h.Bytes -= size
	s := w.summary(ck)
	s.paths--
	if !w.holds(ck) {
		s.hosts--
	}
	return w.setSummary(ck, s)
}

// holds reports whether the host has a path with content ck.
func (w *vtx) holds(ck []byte) bool {
	p := append(bytes.Clone(ck), w.h.numKey()...)
	k, _ := w.tx.Bucket(bucketDigest).Cursor().Seek(p)
	return k != nil && bytes.HasPrefix(k, p)
}

type summary struct{ size, paths, hosts int64 }

func (w *vtx) summary(ck []byte) summary {
	return decodeSummary(w.tx.Bucket(bucketDigests).Get(ck))
}

// decodeSummary reads a digests value; one cut short reads as nothing.
func decodeSummary(v []byte) summary {
	d := &codec.Decoder{B: v}
	s := summary{int64(d.Uvarint()), int64(d.Uvarint()), int64(d.Uvarint())}
	if d.Err != nil {
		return summary{}
	}
	return s
}

// xdupKey is content ck's key in xdups: largest first.
func xdupKey(ck []byte) []byte { return codec.DescKey(contentSize(ck), ck[:len(ck)-8]) }

// xdupContent is the content key of an xdups key.
func xdupContent(k []byte) []byte {
	return binary.BigEndian.AppendUint64(bytes.Clone(k[8:]), ^binary.BigEndian.Uint64(k))
}

func (w *vtx) setSummary(ck []byte, s summary) error {
	xd := w.tx.Bucket(bucketXDups)
	if s.hosts >= 2 {
		if err := xd.Put(xdupKey(ck), nil); err != nil {
			return err
		}
	} else if err := xd.Delete(xdupKey(ck)); err != nil {
		return err
	}
	if s.paths <= 0 {
		return w.tx.Bucket(bucketDigests).Delete(ck)
	}
	v := codec.AppendUvarints(nil, uint64(s.size), uint64(s.paths), uint64(s.hosts))
	return w.tx.Bucket(bucketDigests).Put(ck, v)
}

// sweepOld removes up to max of the host's records not tagged tag and
// returns how many it removed.
func (w *vtx) sweepOld(tag uint64, max int) (int, error) {
	return w.removeWhere(max, func(t uint64) bool { return t != tag })
}

// removeWhere removes up to max of the host's records whose tag drop
// accepts and returns how many it removed.
func (w *vtx) removeWhere(max int, drop func(tag uint64) bool) (int, error) {
	p := w.h.numKey()
	type victim struct {
		fk, d []byte
		b     key.Backend
		size  int64
	}
	var vs []victim
	c := w.tx.Bucket(bucketFiles).Cursor()
	for k, val := c.Seek(p); k != nil && bytes.HasPrefix(k, p) && len(vs) < max; k, val = c.Next() {
		b, d, size, t, err := decodeFile(val)
		if err != nil {
			return 0, err
		}
		if drop(t) {
			vs = append(vs, victim{bytes.Clone(k), bytes.Clone(d), b, size})
		}
	}
	for _, x := range vs {
		if err := w.remove(x.fk, x.b, x.d, x.size); err != nil {
			return 0, err
		}
	}
	return len(vs), nil
}

// state returns the wire state of host name.
func (v *view) state(name string) hubwire.State {
	v.mu.Lock()
	defer v.mu.Unlock()
	h, ok := v.hosts[name]
	if !ok {
		return hubwire.State{Name: name}
	}
	return v.stateLocked(h)
}

// seenLocked is when host h was last heard.
func (v *view) seenLocked(h *hostRec) time.Time {
	seen := h.LastSeen
	if t, ok := v.seen[h.Name]; ok && t.After(seen) {
		seen = t
	}
	return seen
}

func (v *view) stateLocked(h *hostRec) hubwire.State {
	seen := v.seenLocked(h)
	st := hubwire.State{Name: h.Name, HostID: h.HostID, Epoch: h.Epoch, Seq: h.Seq, Complete: h.Complete,
		Gap: h.Gap, LastSeen: seen, Records: h.Records, Bytes: h.Bytes, Stale: v.now().Sub(seen) > v.stale,
		Instance: h.Instance}
	if t, ok := v.rivals[h.Name]; ok && v.now().Sub(t) <= v.lease {
		st.Rival = t
	}
	if h.Complete {
		st.IndexID, st.Chain = hex.EncodeToString(h.IndexID[:]), h.Chain
	}
	if h.Pending != nil && !h.Pending.Broken {
		st.Resending = h.Pending.Epoch
	}
	return st
}

// states lists every host.
func (v *view) states() []hubwire.State {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]hubwire.State, 0, len(v.hosts))
	for _, h := range v.hosts {
		out = append(out, v.stateLocked(h))
	}
	return out
}
