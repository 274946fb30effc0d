package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store/codec"
)

// schema4Index is the schema-2 fixture migrated, then taken back to what
// a schema-4 annexd wrote: empty digest-index values and schema 4.
func schema4Index(t *testing.T) (string, listing) {
	t.Helper()
	path, want := schema2Index(t)
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	editRaw(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket(codec.BucketDigest)
		var ks [][]byte
		_ = b.ForEach(func(k, _ []byte) error { ks = append(ks, bytes.Clone(k)); return nil })
		for _, k := range ks {
			if err := b.Put(k, nil); err != nil {
				return err
			}
		}
		return tx.Bucket(codec.BucketMeta).Put(codec.MetaSchema, binary.AppendUvarint(nil, 4))
	})
	return path, want
}

// Opening a schema-4 index read-only refuses; a writable open writes
// every digest-index value in place, keeping everything else; brief
// listings then agree with full ones.
func TestMigrateSchema4(t *testing.T) {
	migrateTxSize = 4096 // many chunks
	t.Cleanup(func() { migrateTxSize = compactTxSize })
	path, want := schema4Index(t)
	if _, err := Open(path, Options{ReadOnly: true}); !errors.Is(err, ErrNeedsMigration) {
		t.Fatalf("read-only open of schema 4 = %v", err)
	}
	var log bytes.Buffer
	s := openTestAt(t, path, Options{NoSync: true, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.SchemaVer != SchemaVersion {
		t.Fatalf("schema after migration: %d", st.SchemaVer)
	}
	if !strings.Contains(log.String(), "store: added device and inode numbers to the digest index") ||
		!strings.Contains(log.String(), fmt.Sprintf("entries=%d", st.Digested)) {
		t.Errorf("migration log: %q", log.String())
	}
	sameListing(t, listIndex(t, s), want)
	mustCheck(t, s)
	sameBrief(t, s)
}

// A schema-4 migration stopped after any chunk leaves schema 4; the next
// open writes the values again.
func TestMigrateSchema4Interrupted(t *testing.T) {
	migrateTxSize = 4096
	t.Cleanup(func() { migrateTxSize = compactTxSize; migrateHook = func(string) error { return nil } })
	path, want := schema4Index(t)
	boom := errors.New("injected failure")
	for _, nth := range []int{1, 3, 7} {
		n := 0
		migrateHook = func(step string) error {
			if step == "digest" {
				if n++; n == nth {
					return boom
				}
			}
			return nil
		}
		if _, err := Open(path, Options{NoSync: true}); !errors.Is(err, boom) {
			t.Fatalf("open failing at chunk %d = %v", nth, err)
		}
		if v := schemaOf(t, path); v != 4 {
			t.Fatalf("after failure at chunk %d: schema %d", nth, v)
		}
	}
	migrateHook = func(string) error { return nil }
	s := openTestAt(t, path, Options{NoSync: true})
	sameListing(t, listIndex(t, s), want)
	sameBrief(t, s)
}

// sameBrief lists the groups twice, brief and full, and compares them.
func sameBrief(t *testing.T, s *Store) {
	t.Helper()
	var full, brief []Group
	for _, c := range []struct {
		opts DupOptions
		out  *[]Group
	}{{DupOptions{}, &full}, {DupOptions{Brief: true}, &brief}} {
		err := s.Dups(context.Background(), c.opts, func(g Group) error { *c.out = append(*c.out, g); return nil })
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(full) == 0 || len(full) != len(brief) {
		t.Fatalf("%d groups in full, %d brief", len(full), len(brief))
	}
	for i, g := range full {
		b := brief[i]
		if !bytes.Equal(g.Cursor, b.Cursor) || g.Duplicate != b.Duplicate || g.Inodes != b.Inodes || g.Size != b.Size {
			t.Fatalf("group %d: brief %+v, full %+v", i, b, g)
		}
		if err := sameMembers(b.Members, briefMembers(g.Members)); err != nil {
			t.Fatalf("group %d: %v", i, err)
		}
	}
}

// Check reports a digest-index value that disagrees with its record, and
// an open refuses one that does not decode.
func TestCheckDigestValue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	mustPut(t, s, "/a/x", rec("same", 10, 1, 1))
	mustPut(t, s, "/a/y", rec("same", 10, 1, 2))
	stop()
	mustCheck(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		value []byte
		check string // what Check reports; "" when the open refuses
	}{
		{"other inode", codec.DigestValue(&Record{Backend: key.SHA256E, Dev: 1, Ino: 7}), "its record says"},
		{"empty", nil, ""},
		{"trailing bytes", append(codec.DigestValue(&Record{Backend: key.SHA256E, Dev: 1, Ino: 1}), 0), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "index.db")
			copyFile(t, path, p)
			setFirstDigestValue(t, p, c.value)
			s, err := Open(p, Options{NoSync: true})
			if c.check == "" {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("open = %v, want ErrCorrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			rep, err := s.Check()
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], c.check) {
				t.Fatalf("problems %q, want one saying %q", rep.Problems, c.check)
			}
		})
	}
}

func setFirstDigestValue(t *testing.T, path string, v []byte) {
	t.Helper()
	editRaw(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket(codec.BucketDigest)
		k, _ := b.Cursor().First()
		return b.Put(bytes.Clone(k), v)
	})
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err == nil {
		err = os.WriteFile(to, b, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Brief listings, read one chunk ahead, agree with full ones over many
// chunks, page alike with After and Limit, stop at ErrStop and end with
// the context's error when it is cancelled.
func TestDupsBriefChunks(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	var changes []Change
	for i := range 6000 { // 12,000 members: three chunks
		for c := range 2 {
			r := rec(fmt.Sprint(i), int64(100+i), 1, uint64(2*i+c+1))
			changes = append(changes, Change{Op: OpPut, Path: p("/d%d/f%d-%d", i%50, i, c), Record: r})
		}
	}
	if err := s.SubmitAll(ctx, changes); err != nil {
		t.Fatal(err)
	}
	sameBrief(t, s)
	var full [][]byte
	if err := s.Dups(ctx, DupOptions{}, func(g Group) error { full = append(full, g.Cursor); return nil }); err != nil {
		t.Fatal(err)
	}
	var paged [][]byte
	var after []byte
	for {
		n := 0
		err := s.Dups(ctx, DupOptions{Brief: true, After: after, Limit: 2500}, func(g Group) error {
			paged, after = append(paged, g.Cursor), g.Cursor
			n++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if len(paged) != len(full) || len(full) != 6000 {
		t.Fatalf("paged %d groups, full %d, want 6000", len(paged), len(full))
	}
	for i := range full {
		if !bytes.Equal(paged[i], full[i]) {
			t.Fatalf("group %d: paged %x, full %x", i, paged[i], full[i])
		}
	}
	n := 0
	err := s.Dups(ctx, DupOptions{Brief: true}, func(Group) error {
		if n++; n == 10 {
			return ErrStop
		}
		return nil
	})
	if err != nil || n != 10 {
		t.Fatalf("stopped after %d groups: %v", n, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	n = 0
	err = s.Dups(cctx, DupOptions{Brief: true}, func(Group) error {
		if n++; n == 10 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n >= 6000 {
		t.Fatalf("cancelled after %d groups: %v", n, err)
	}
}
