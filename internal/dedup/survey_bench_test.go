package dedup

import (
	"context"
	"fmt"
	"testing"

	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/store"
)

// BenchmarkSurveyGroups: the survey of 10^4 groups of two 4 KiB copies
// on XFS, as dups --resurvey makes it: the extent maps alone
// (survey), and with the index checking and keeping each survey (kept).
// ns/op is per member.
func BenchmarkSurveyGroups(b *testing.B) {
	fs := loopfs.New(b, loopfs.XFS, loopfs.Options{Size: loopfs.MinSize[loopfs.XFS]})
	st := openStore(b)
	const groups = 10_000
	for g := range groups {
		data := content(byte(g), 4096)
		data[0], data[1] = byte(g), byte(g>>8)
		for _, c := range []string{"a", "b"} {
			p := fs.Path(fmt.Sprintf("d%02d/%s%05d", g%100, c, g))
			writeFile(b, p, data)
			record(b, st, p)
		}
	}
	var gs []store.Group
	if err := st.Dups(context.Background(), store.DupOptions{Brief: true}, func(g store.Group) error {
		gs = append(gs, g)
		return nil
	}); err != nil || len(gs) != groups {
		b.Fatalf("%d groups, %v", len(gs), err)
	}
	b.Run("survey", func(b *testing.B) {
		for b.Loop() {
			for _, g := range gs {
				SurveyGroup(g)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*2*groups), "ns/member")
	})
	b.Run("kept", func(b *testing.B) {
		for b.Loop() {
			for _, g := range gs {
				sv, seen := SurveyGroup(g)
				st.SubmitSurvey(g.Backend, g.Digest, sv, seen, nil)
			}
			if err := st.PutMeta(context.Background(), "bench", nil); err != nil { // after the surveys
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*2*groups), "ns/member")
	})
}
