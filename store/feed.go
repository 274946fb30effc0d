package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/key"
)

// The change feed lists every change of what paths hold, for people and
// their scripts (annexctl changes): each entry has a sequence number, its
// kind, the path, and the key the path held before and holds after.
// Unlike the hub's change log (changes.go) it is kept always, whoever
// reads it, and bounded by Options.Feed: its oldest entries go once it
// holds more than Keep entries or they are older than MaxAge.
//
// A reader remembers the feed's index id and the last sequence it has,
// and asks for the entries after it. When they are no longer kept, or
// the id is another (a new index file), the answer is ErrResync: the
// reader must take the whole index again.
//
// What the feed logs is a record's settled view: no record, a key that
// is the content's (ok), or a key kept for bytes that went bad (corrupt,
// unreadable). Records waiting to be hashed are not news; their paths
// are logged once hashed. A path whose record went and another whose
// record came in one transaction, with the same file (dev, inode) and
// key, moved. A change submitted with Change.Finding is rot, not an
// edit, whatever its key.
//
// Like the change log, every transaction that logs records bbolt's
// transaction id; when Open finds a later one, someone wrote without
// logging (an older annexd, a migration, compaction, repair), and the
// feed gets a gap: every reader behind it resyncs.

// Buckets and keys of the feed: the state lives beside the log, as in
// the change log's bucket.
var bucketFeed = []byte("feed")

// Defaults of Options.Feed.
const (
	DefaultFeedKeep   = 1 << 20
	DefaultFeedMaxAge = 90 * 24 * time.Hour
)

// feedTrimChunk bounds the entries one transaction trims beyond those it
// adds, so a shrunk bound is reached over several commits.
const feedTrimChunk = 4096

// FeedOptions bound the change feed.
type FeedOptions struct {
	// Keep is how many entries are kept at most; 0 is DefaultFeedKeep, a
	// negative value keeps no feed.
	Keep int
	// MaxAge drops entries older than this; 0 is DefaultFeedMaxAge, a
	// negative value keeps entries of any age.
	MaxAge time.Duration
}

func (o *FeedOptions) fill() {
	if o.Keep == 0 {
		o.Keep = DefaultFeedKeep
	}
	if o.MaxAge == 0 {
		o.MaxAge = DefaultFeedMaxAge
	}
}

func (o *FeedOptions) on() bool { return o.Keep > 0 }

// ErrResync: the entries asked for are no longer kept, or they are of
// another index. The reader must take the whole index again.
var ErrResync = errors.New("store: changes no longer kept, resync")

// ErrNoFeed: the index was opened without a feed (FeedOptions.Keep < 0).
var ErrNoFeed = errors.New("store: change feed not kept")

// FeedKind says what happened to a path.
type FeedKind uint8

// The kinds of feed entries. Written to disk: only append.
const (
	FeedAdd        FeedKind = iota + 1 // the path holds content it did not hold
	FeedEdit                           // the path holds other content (Old → New)
	FeedDelete                         // the path holds nothing any more
	FeedMove                           // the content at From is now at Path
	FeedRot                            // the bytes went bad with no write: Finding says how
	FeedUnreadable                     // the file cannot be read any more
	FeedHealed                         // a file flagged before matches its key again
	feedKindEnd
)

var feedKindNames = [feedKindEnd]string{"", "add", "edit", "delete", "move", "rot", "unreadable", "healed"}

func (k FeedKind) String() string {
	if k >= feedKindEnd {
		return fmt.Sprintf("FeedKind(%d)", uint8(k))
	}
	return feedKindNames[k]
}

// ContentKey is what a path holds: a backend, digest and size. The zero
// value is nothing.
type ContentKey struct {
	Backend key.Backend
	Digest  []byte
	Size    int64
}

// IsZero reports whether k names no content.
func (k ContentKey) IsZero() bool { return k.Backend == key.Unknown }

func (k ContentKey) equal(o ContentKey) bool {
	return k.Backend == o.Backend && bytes.Equal(k.Digest, o.Digest) && k.Size == o.Size
}

// FeedEntry is one change of the feed.
type FeedEntry struct {
	Seq  uint64
	Time int64 // unix ns of the commit
	Kind FeedKind
	Path []byte
	From []byte // FeedMove: where the content was
	// Old is the key the path held before (FeedMove: From's); New the key
	// it holds now. A rot or unreadable entry has the key kept as Old and,
	// for a lost write, the key of the bytes now on disk as New.
	Old, New ContentKey
	Finding  string // FeedRot: "corrupt", "lost_write", "untraced" (the audit's classes)
}

// FeedState is where the feed stands.
type FeedState struct {
	IndexID IndexID
	Seq     uint64 // the last sequence number handed out
	Floor   uint64 // the first one kept
}

// readFeedState reads the state of the feed bucket b.
func readFeedState(b *bolt.Bucket) FeedState {
	var st FeedState
	copy(st.IndexID[:], b.Get(changesID))
	st.Seq, st.Floor = getUint(b, changesSeq), getUint(b, changesFloor)
	return st
}

// enableFeed makes sure the feed exists, gives it a gap when someone
// wrote without logging, and trims it to opts.
func enableFeed(db *bolt.DB, opts FeedOptions) error {
	return db.Update(func(tx *bolt.Tx) error {
		if err := openFeed(tx, opts); err != nil {
			return err
		}
		return keepChangesTxid(tx)
	})
}

func openFeed(tx *bolt.Tx, opts FeedOptions) error {
	b := tx.Bucket(bucketFeed)
	if b == nil {
		return createFeed(tx)
	}
	if getUint(b, changesTxid) != uint64(tx.ID()-1) {
		if err := gapChanges(b, false); err != nil {
			return err
		}
	}
	if err := trimFeed(b, opts, -1, time.Now()); err != nil {
		return err
	}
	return putUint(b, changesTxid, uint64(tx.ID()))
}

// createFeed makes the feed with a new index id, as the change log is
// made (createLog).
func createFeed(tx *bolt.Tx) error { return createLog(tx, bucketFeed) }

// keepFeedTxid carries the feed's last transaction id over a transaction
// that changes no record.
func keepFeedTxid(tx *bolt.Tx) error {
	b := tx.Bucket(bucketFeed)
	if b == nil || getUint(b, changesTxid) != uint64(tx.ID()-1) {
		return nil
	}
	return putUint(b, changesTxid, uint64(tx.ID()))
}

// trimFeed drops the oldest entries beyond opts: at most limit of them
// (all when limit < 0), and those older than now - MaxAge.
func trimFeed(b *bolt.Bucket, opts FeedOptions, limit int, now time.Time) error {
	st := readFeedState(b)
	excess := int64(st.Seq+1-st.Floor) - int64(opts.Keep)
	var cutoff int64
	if opts.MaxAge > 0 {
		cutoff = now.Add(-opts.MaxAge).UnixNano()
	}
	log := b.Bucket(bucketLog)
	var keys [][]byte
	c := log.Cursor()
	for k, v := c.First(); k != nil && (limit < 0 || len(keys) < limit); k, v = c.Next() {
		if int64(len(keys)) >= excess && feedTime(v) >= cutoff {
			break
		}
		keys = append(keys, bytes.Clone(k))
	}
	if len(keys) == 0 {
		return nil
	}
	for _, k := range keys {
		if err := log.Delete(k); err != nil {
			return err
		}
	}
	return putUint(b, changesFloor, binary.BigEndian.Uint64(keys[len(keys)-1])+1)
}

// feedLog is the change feed's read side: where it stands, the entries
// after a sequence, a wait for the next (the writer feeds it: feedtx.go).
type feedLog struct {
	*reader
	bell    *bell           // rung after a commit that fed the feed
	closing <-chan struct{} // the store's, closed by Close
}

// feedEnabled reports whether the store keeps a feed.
func (s *feedLog) feedEnabled() bool { return s.opts.Feed.on() }

func (s *feedLog) feedView(fn func(b *bolt.Bucket) error) error {
	if !s.feedEnabled() {
		return ErrNoFeed
	}
	return s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketFeed)
		if b == nil {
			return ErrNoFeed
		}
		return fn(b)
	})
}

// Feed returns where the change feed stands.
func (s *feedLog) Feed() (FeedState, error) {
	var st FeedState
	err := s.feedView(func(b *bolt.Bucket) error {
		st = readFeedState(b)
		return nil
	})
	return st, err
}

// FeedAfter returns up to max entries after sequence after, in order,
// and the feed's state. ErrResync when some of them are no longer kept,
// after is beyond the last, or id is set and is not the feed's.
func (s *feedLog) FeedAfter(id IndexID, after uint64, max int) ([]FeedEntry, FeedState, error) {
	var (
		out []FeedEntry
		st  FeedState
	)
	err := s.feedView(func(b *bolt.Bucket) error {
		st = readFeedState(b)
		switch {
		case !id.IsZero() && id != st.IndexID:
			return fmt.Errorf("%w: index id %s, the feed's is %s", ErrResync, id, st.IndexID)
		case after+1 < st.Floor || after > st.Seq:
			return fmt.Errorf("%w: after %d, the feed holds %d to %d", ErrResync, after, st.Floor, st.Seq)
		}
		c := b.Bucket(bucketLog).Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil && len(out) < max; k, v = c.Next() {
			e, err := decodeFeed(binary.BigEndian.Uint64(k), v)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	return out, st, err
}

// FeedWait waits until the feed has an entry after sequence after, or
// ctx ends (its error then).
func (s *feedLog) FeedWait(ctx context.Context, after uint64) error {
	for {
		wake := s.bell.wait()
		st, err := s.Feed()
		if err != nil || st.Seq > after {
			return err
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closing:
			return ErrClosed
		}
	}
}

// bell wakes the feed's waiters after a commit that logged.
type bell struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next ring.
func (b *bell) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *bell) ring() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
