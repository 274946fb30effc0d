package logrepeat

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/annexd/annexd/internal/testutil"
	"github.com/annexd/annexd/store"
)

// One record per kind of repeated index error is logged, whatever logger
// it comes through; the rest are counted, and other records pass.
func TestRepeatFilter(t *testing.T) {
	buf := new(testutil.Buffer)
	f := New(slog.NewTextHandler(buf, nil), store.ErrCorrupt, store.ErrNoSpace)
	log := slog.New(f)
	ix := log.With("part", "indexer")
	for i := range 100 {
		ix.Error("cannot read index", "path", fmt.Sprint("/r/", i), "err", fmt.Errorf("get: %w", store.ErrCorrupt))
		log.Error("cannot write index", "err", fmt.Errorf("%w: /i", store.ErrNoSpace))
	}
	log.Error("other failure", "err", errors.New("boom"))
	out := buf.String()
	if n := strings.Count(out, "cannot read index"); n != 1 {
		t.Errorf("%d damage records logged, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "cannot write index"); n != 1 {
		t.Errorf("%d no-space records logged, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "other failure") {
		t.Errorf("an unrelated record was left out:\n%s", out)
	}
	if d := f.Dropped(store.ErrCorrupt); d != 99 {
		t.Errorf("dropped %d damage records, want 99", d)
	}
}
