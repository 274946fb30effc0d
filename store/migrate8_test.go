package store

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// An index of schema 7 (whose annexd takes state untraced for damage) is
// migrated to schema 8 by writing the version alone: its records stay as
// they were, a read-only open asks for the migration first, and the
// migrated index then keeps an untraced record, which the check accepts.
func TestMigrateSchema7(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	ok, rot := rec("a", 1, 1, 10), rec("b", 1, 1, 11)
	rot.State = StateCorrupt
	mustPut(t, s, "/r/a", ok)
	mustPut(t, s, "/r/b", rot)
	stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	editRaw(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket(codec.BucketMeta).Put(codec.MetaSchema, binary.AppendUvarint(nil, 7))
	})
	if _, err := Open(path, Options{ReadOnly: true}); !errors.Is(err, ErrNeedsMigration) {
		t.Fatalf("read-only open of schema 7 = %v, want ErrNeedsMigration", err)
	}
	s = openTestAt(t, path, Options{NoSync: true})
	if st, _ := s.Stats(); st.SchemaVer != 8 {
		t.Fatalf("schema after migration: %d, want 8", st.SchemaVer)
	}
	for path, want := range map[string]Record{"/r/a": ok, "/r/b": rot} {
		got, found, err := s.Get([]byte(path))
		if err != nil || !found || !got.SameContent(&want) {
			t.Errorf("%s after migration: %+v %v %v, want %+v", path, got, found, err, want)
		}
	}
	untraced := rot
	untraced.State = StateUntraced
	mustPut(t, s, "/r/b", untraced)
	if got, _, err := s.Get([]byte("/r/b")); err != nil || got.State != StateUntraced {
		t.Fatalf("untraced record reads back as %v, %v", got.State, err)
	}
}
