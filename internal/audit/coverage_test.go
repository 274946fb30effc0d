package audit

import (
	"fmt"
	"testing"
	"time"
)

// A count of the coverage that stands (a slow one, ten times what it
// took) is made again all the same when it found no file and the index
// changed since, or when it was made during bulk work that has ended:
// status right after a first scan counts the files the scan wrote.
func TestCoverageCountedAgainAfterAScan(t *testing.T) {
	for _, c := range []struct {
		name   string
		before int   // files indexed before the count that stands
		bulk   bool  // that count was made during bulk work
		want   int64 // Coverage.Total after 5 more files
	}{
		{"a count of no file", 0, false, 5},
		{"a count during bulk work", 3, true, 8},
		{"a count of files, not in bulk", 3, false, 3}, // stands: ten times what it took
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, "", envOptions())
			for i := range c.before {
				e.write(fmt.Sprintf("a%d", i), fmt.Sprintf("file a%d", i))
			}
			e.ix.Rescan(e.root)
			e.settle()
			e.a.countCoverage(t.Context())
			e.a.mu.Lock()
			if e.a.cover.Total != int64(c.before) {
				t.Fatalf("counted %d files, want %d", e.a.cover.Total, c.before)
			}
			e.a.coverTook, e.a.coverBulk = time.Hour, c.bulk // the count stands
			e.a.mu.Unlock()
			for i := range 5 {
				e.write(fmt.Sprintf("b%d", i), fmt.Sprintf("file b%d", i))
			}
			e.ix.Rescan(e.root)
			e.settle()
			if got := e.a.Status().Coverage.Total; got != c.want {
				t.Errorf("coverage counts %d files, want %d", got, c.want)
			}
		})
	}
}
