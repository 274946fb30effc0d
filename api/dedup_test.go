package api

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// Every kind of event survives the wire, paths byte for byte.
func TestDedupEventRoundTrip(t *testing.T) {
	odd := []byte("/caf\xe9/\xff.bin")
	events := []DedupEvent{
		{Plan: &DedupPlan{Mode: "reflink", Groups: 2, Actions: 3, Frees: 4096, AlreadyShared: 1, NoBlocks: 2,
			Unsupported: []DedupUnsupported{{FS: "ext4", Path: odd, Error: "operation not supported", Groups: 1, Actions: 1, Frees: 10}}}},
		{Plan: &DedupPlan{Mode: "hardlink", DryRun: true}},
		{Plan: &DedupPlan{Mode: "trash", DryRun: true}},
		{Group: &DedupGroup{Keeper: []byte("/a/keep"), Size: 10, Frees: 20, Targets: [][]byte{odd, []byte("/a/\"q\"")}}},
		{Group: &DedupGroup{Keeper: []byte("/a/keep"), Size: 1, Frees: 1, Targets: [][]byte{[]byte("/a/t")}, Trash: odd}},
		{Progress: &DedupProgress{Done: 1, Total: 3, Freed: 4096}},
		{Skip: &DedupSkip{Keeper: odd, Target: []byte("/a/t"), Reason: "changed"}},
		{Skip: &DedupSkip{Keeper: []byte("/k"), Target: odd, Reason: "error", Detail: "EIO"}},
	}
	for _, ev := range events {
		line := ev.AppendJSON(nil)
		if bytes.IndexByte(line, '\n') >= 0 || bytes.HasPrefix(line, EndPrefix) {
			t.Fatalf("%s: not one event line", line)
		}
		var got DedupEvent
		if err := got.UnmarshalJSON(line); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if !reflect.DeepEqual(got, ev) {
			t.Errorf("%s\n decodes to %+v\n want %+v", line, got, ev)
		}
	}
	if got := string((DedupEvent{Skip: &DedupSkip{Keeper: odd, Target: []byte("/t"), Reason: "changed"}}).AppendJSON(nil)); got !=
		`{"skip":{"keeper":"/caf\ufffd/\ufffd.bin","keeper_b64":"L2NhZukv/y5iaW4=","target":"/t","reason":"changed"}}` {
		t.Errorf("skip line %s", got)
	}
}

func TestDedupEventRejects(t *testing.T) {
	for _, line := range []string{`{"plan":{},"skip":{"keeper":"/a","target":"/b"}}`, `{"group":{"size":1}}`,
		`{"skip":{"keeper":"/a","target_b64":"*"}}`, `[]`} {
		var ev DedupEvent
		if err := ev.UnmarshalJSON([]byte(line)); err == nil {
			t.Errorf("%s accepted as %+v", line, ev)
		}
	}
}

func TestDedupErrorIs(t *testing.T) {
	for code, want := range map[string]error{CodeUnsupported: ErrUnsupported, CodeInterrupted: ErrInterrupted, CodeInternal: ErrServer} {
		err := error(&DedupError{Code: code, Message: "m"})
		if !errors.Is(err, want) {
			t.Errorf("code %s is not %v", code, want)
		}
		for _, other := range []error{ErrUnsupported, ErrInterrupted, ErrServer} {
			if other != want && errors.Is(err, other) {
				t.Errorf("code %s is also %v", code, other)
			}
		}
	}
}

func TestDedupQuery(t *testing.T) {
	v := dedupQuery(DedupRequest{DryRun: true, Hardlink: true, MinSize: 5, Groups: -1, Progress: true, UID: 7})
	if got := v.Encode(); got != "dry_run=1&groups=all&hardlink=1&min_size=5&progress=1" {
		t.Errorf("query %s", got)
	}
	if got := dedupQuery(DedupRequest{Groups: 10}).Encode(); got != "groups=10" {
		t.Errorf("query %s", got)
	}
}

// FuzzDedupEvent: any line that decodes encodes to a line that decodes to
// the same event.
func FuzzDedupEvent(f *testing.F) {
	for _, s := range []string{`{"plan":{"mode":"reflink","groups":1,"unsupported":[{"fs":"ext4","path_b64":"L3g="}]}}`,
		`{"group":{"keeper":"/a","size":1,"frees":1,"targets":[{"path":"/b"},{"path_b64":"/w=="}]}}`,
		`{"progress":{"done":1,"total":2,"freed":3}}`, `{"skip":{"keeper":"/a","target":"/b","reason":"x"}}`,
		`{"later":{}}`, `{"plan":null}`, `{"group":{"keeper":"/a","targets":[]}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var a DedupEvent
		if a.UnmarshalJSON(line) != nil {
			return
		}
		once := a.AppendJSON(nil)
		var b DedupEvent
		if err := b.UnmarshalJSON(once); err != nil {
			t.Fatalf("%q → %s: %v", line, once, err)
		}
		if twice := b.AppendJSON(nil); !bytes.Equal(once, twice) {
			t.Fatalf("%q → %s → %s", line, once, twice)
		}
	})
}
