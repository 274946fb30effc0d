package hub

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store/codec"
)

// Query bounds: a page holds at most maxLimit items, and one request reads
// at most scanBudget keys before it returns a page with a cursor, so no
// query holds a read transaction for long.
const (
	defaultLimit = 1000
	maxLimit     = 10000
	scanBudget   = 100000
	// maxReplyBytes ends a page early, well below the server's 8 MiB
	// message limit, however many paths its items list.
	maxReplyBytes = 4 << 20
)

// approxSize is about what c takes in a JSON reply.
func approxSize(c *hubwire.Content) int {
	n := 200
	for _, h := range c.Holders {
		n += 100
		for _, p := range h.Paths {
			n += len(p)*4/3 + 4
		}
	}
	return n
}

// ErrQuery: a query that cannot be answered as asked.
var ErrQuery = errors.New("hub: bad query")

// parseDigest reads a base backend name and a hex digest.
func parseDigest(backend, digest string) ([]byte, error) {
	b, err := key.ParseBackend(backend)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrQuery, err)
	}
	d, err := hex.DecodeString(digest)
	if err != nil || len(d) != b.DigestLen() {
		return nil, fmt.Errorf("%w: digest %q is not %d hex bytes", ErrQuery, digest, b.DigestLen())
	}
	return codec.DigestKey(nil, b.Base(), d), nil
}

// hostView is what a query needs of the hosts: names and freshness.
type hostView struct {
	names map[uint32]string
	st    map[string]hubwire.State
	// resending holds, for each host with a whole resend under way
	// (complete or not, broken or not), the tag of the records it sent
	// again: its others are from before it, and may be gone.
	resending map[uint32]uint64
}

func (v *view) hostView() hostView {
	hv := hostView{names: map[uint32]string{}, st: map[string]hubwire.State{}, resending: map[uint32]uint64{}}
	v.mu.Lock()
	defer v.mu.Unlock()
	for num, name := range v.byNum {
		h := v.hosts[name]
		hv.names[num] = name
		hv.st[name] = v.stateLocked(h)
		if h.Pending != nil {
			hv.resending[num] = h.Pending.Tag
		}
	}
	return hv
}

// unconfirmed reports whether host num's record at path is from before
// the host's whole resend under way, which has not sent it again yet.
func (hv hostView) unconfirmed(tx *bolt.Tx, num uint32, path []byte) bool {
	tag, ok := hv.resending[num]
	if !ok {
		return false
	}
	v := tx.Bucket(bucketFiles).Get(append(binary.BigEndian.AppendUint32(nil, num), path...))
	if v == nil {
		return false
	}
	_, _, _, t, err := decodeFile(v)
	return err == nil && t != tag
}

// holders lists who holds content ck, fresh hosts first, then by name.
func holders(tx *bolt.Tx, hv hostView, ck []byte) []hubwire.Holder {
	by := map[string]*hubwire.Holder{}
	c := tx.Bucket(bucketDigest).Cursor()
	for k, _ := c.Seek(ck); k != nil && bytes.HasPrefix(k, ck); k, _ = c.Next() {
		rest := k[len(ck):]
		if len(rest) < 4 {
			continue
		}
		num := binary.BigEndian.Uint32(rest)
		name, ok := hv.names[num]
		if !ok {
			continue
		}
		h := by[name]
		if h == nil {
			st := hv.st[name]
			h = &hubwire.Holder{Host: name, Stale: st.Stale, LastSeen: st.LastSeen}
			by[name] = h
		}
		if h.Count++; len(h.Paths) < hubwire.MaxPaths {
			h.Paths = append(h.Paths, bytes.Clone(rest[4:]))
		}
		if hv.unconfirmed(tx, num, rest[4:]) {
			h.Unconfirmed++
		}
	}
	out := make([]hubwire.Holder, 0, len(by))
	for _, h := range by {
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool {
		if fi, fj := isCopy(&out[i]), isCopy(&out[j]); fi != fj {
			return fi
		}
		return out[i].Host < out[j].Host
	})
	return out
}

// isCopy reports whether h counts as a copy: its host is fresh, and a
// resend under way has confirmed at least one of its paths.
func isCopy(h *hubwire.Holder) bool { return !h.Stale && h.Count > h.Unconfirmed }

// content is the answer for content key ck.
func content(ck []byte, hs []hubwire.Holder) hubwire.Content {
	b := key.Backend(ck[0])
	return hubwire.Content{Backend: b.String(), Digest: hex.EncodeToString(ck[1 : len(ck)-8]), Size: contentSize(ck), Holders: hs}
}

// fresh counts the holders that count as copies.
func fresh(hs []hubwire.Holder) int {
	n := 0
	for i := range hs {
		if isCopy(&hs[i]) {
			n++
		}
	}
	return n
}

// whereis answers, for host asker, which hosts hold a content. Without a
// size it answers for the size the asker holds, else the one most hosts
// hold: another host's claim of the digest with another size never hides
// the asker's own.
func (v *view) whereis(asker string, req hubwire.WhereisRequest) (hubwire.Content, error) {
	dk, err := parseDigest(req.Backend, req.Digest)
	if err != nil {
		return hubwire.Content{}, err
	}
	var ck []byte
	if req.Size != nil {
		if *req.Size < 0 {
			return hubwire.Content{}, fmt.Errorf("%w: size %d", ErrQuery, *req.Size)
		}
		ck = binary.BigEndian.AppendUint64(bytes.Clone(dk), uint64(*req.Size))
	}
	hv := v.hostView()
	v.mu.Lock()
	var own []byte
	if h, ok := v.hosts[asker]; ok {
		own = h.numKey()
	}
	v.mu.Unlock()
	var c hubwire.Content
	err = v.db.View(func(tx *bolt.Tx) error {
		if ck == nil {
			ck = pickSize(tx, dk, own)
		}
		c = content(ck, holders(tx, hv, ck))
		return nil
	})
	return c, err
}

// pickSize returns the content of digest dk that host number own holds,
// else the one held by the most hosts (the smallest of equals); dk with
// size 0 when none is held.
func pickSize(tx *bolt.Tx, dk, own []byte) []byte {
	var best []byte
	var most int64 = -1
	c := tx.Bucket(bucketDigests).Cursor()
	for k, val := c.Seek(dk); k != nil && bytes.HasPrefix(k, dk) && len(k) == len(dk)+8; k, val = c.Next() {
		if own != nil {
			p := append(bytes.Clone(k), own...)
			if h, _ := tx.Bucket(bucketDigest).Cursor().Seek(p); h != nil && bytes.HasPrefix(h, p) {
				return bytes.Clone(k)
			}
		}
		if s := decodeSummary(val); s.hosts > most {
			best, most = bytes.Clone(k), s.hosts
		}
	}
	if best == nil {
		return binary.BigEndian.AppendUint64(bytes.Clone(dk), 0)
	}
	return best
}

func limit(n int) int {
	switch {
	case n <= 0:
		return defaultLimit
	case n > maxLimit:
		return maxLimit
	}
	return n
}

// dups lists content held by two hosts or more, largest first.
func (v *view) dups(req hubwire.DupsRequest) (hubwire.ListReply, error) {
	hv := v.hostView()
	var out hubwire.ListReply
	n := limit(req.Limit)
	err := v.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketXDups).Cursor()
		var last []byte
		size := 0
		for k, _ := resume(c, nil, req.After); k != nil; k, _ = c.Next() {
			if len(out.Items) == n || size > maxReplyBytes {
				out.Next = last
				return nil
			}
			last = bytes.Clone(k)
			ck := xdupContent(k)
			if contentSize(ck) < req.MinSize {
				return nil
			}
			out.Items = append(out.Items, content(ck, holders(tx, hv, ck)))
			size += approxSize(&out.Items[len(out.Items)-1])
		}
		return nil
	})
	return out, err
}

// resume positions c at the first key after the cursor after, or at
// start when there is no cursor. A cursor is the last key a page used.
func resume(c *bolt.Cursor, start, after []byte) (k, v []byte) {
	if after == nil {
		return c.Seek(start)
	}
	k, v = c.Seek(after)
	if k != nil && bytes.Equal(k, after) {
		k, v = c.Next()
	}
	return k, v
}

// copies lists content held by fewer than req.FewerThan fresh hosts.
func (v *view) copies(req hubwire.CopiesRequest) (hubwire.ListReply, error) {
	if req.FewerThan < 1 {
		return hubwire.ListReply{}, fmt.Errorf("%w: fewer than %d hosts", ErrQuery, req.FewerThan)
	}
	hv := v.hostView()
	if req.Host == "" {
		return v.copiesAll(req, hv)
	}
	v.mu.Lock()
	h, ok := v.hosts[req.Host]
	v.mu.Unlock()
	if !ok {
		return hubwire.ListReply{}, fmt.Errorf("%w: the hub knows no host %q", ErrQuery, req.Host)
	}
	var out hubwire.ListReply
	n := limit(req.Limit)
	num := h.numKey()
	prefix := append(bytes.Clone(num), req.Prefix...)
	err := v.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketFiles).Cursor()
		seenContent := map[string]bool{}
		var last []byte
		read, size := 0, 0
		for k, val := resume(c, prefix, req.After); k != nil && bytes.HasPrefix(k, prefix); k, val = c.Next() {
			if len(out.Items) == n || read == scanBudget || size > maxReplyBytes {
				out.Next = last
				return nil
			}
			read++
			last = bytes.Clone(k)
			if !under(k[len(num):], req.Prefix) {
				continue
			}
			b, d, fsize, _, err := decodeFile(val)
			if err != nil {
				return err
			}
			ck := contentKey(b, d, fsize)
			if seenContent[string(ck)] {
				continue
			}
			seenContent[string(ck)] = true
			hs := holders(tx, hv, ck)
			if fresh(hs) < req.FewerThan {
				out.Items = append(out.Items, content(ck, hs))
				size += approxSize(&out.Items[len(out.Items)-1])
			}
		}
		return nil
	})
	return out, err
}

// under reports whether path is dir or below it; an empty dir or "/"
// covers everything.
func under(path, dir []byte) bool {
	if len(dir) == 0 || bytes.Equal(dir, []byte("/")) || bytes.Equal(path, dir) {
		return true
	}
	d := bytes.TrimSuffix(dir, []byte("/"))
	return bytes.HasPrefix(path, d) && len(path) > len(d) && path[len(d)] == '/'
}

func (v *view) copiesAll(req hubwire.CopiesRequest, hv hostView) (hubwire.ListReply, error) {
	var out hubwire.ListReply
	n := limit(req.Limit)
	err := v.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketDigests).Cursor()
		var last []byte
		read, size := 0, 0
		for k, val := resume(c, nil, req.After); k != nil; k, val = c.Next() {
			if len(out.Items) == n || read == scanBudget || size > maxReplyBytes {
				out.Next = last
				return nil
			}
			read++
			last = bytes.Clone(k)
			s := decodeSummary(val)
			if s.hosts >= int64(req.FewerThan) && !anyStale(hv) && len(hv.resending) == 0 {
				continue
			}
			hs := holders(tx, hv, k)
			if fresh(hs) < req.FewerThan {
				out.Items = append(out.Items, content(k, hs))
				size += approxSize(&out.Items[len(out.Items)-1])
			}
		}
		return nil
	})
	return out, err
}

func anyStale(hv hostView) bool {
	for _, st := range hv.st {
		if st.Stale {
			return true
		}
	}
	return false
}
