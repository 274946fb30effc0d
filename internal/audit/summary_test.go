package audit

import (
	"context"
	"errors"
	"testing"
)

// Summary answers at once for a run asked for, in progress or ended, as
// WaitRun does at the end; an id never handed out is ErrUnknownRun.
func TestSummary(t *testing.T) {
	e := newEnv(t, "", envOptions())
	e.write("a.txt", "some bytes")
	e.write("b.txt", "other bytes")
	e.ix.Rescan(e.root)
	e.settle()
	ctx := context.Background()
	id, err := e.a.Start(ctx, StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.a.Summary(id)
	if err != nil || s.ID != id || !s.Manual {
		t.Fatalf("summary of a run just asked for: %+v, %v", s, err)
	}
	end, err := e.a.WaitRun(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	s, err = e.a.Summary(id)
	if err != nil || s.Ended.IsZero() || s.StoppedBy != StopDone || s.Found(OK) != 2 || s.Ended != end.Ended {
		t.Fatalf("summary of the ended run: %+v, %v; WaitRun said %+v", s, err, end)
	}
	if _, err := e.a.Summary(id + 100); !errors.Is(err, ErrUnknownRun) {
		t.Errorf("unknown run: %v", err)
	}
}
