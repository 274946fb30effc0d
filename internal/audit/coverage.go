package audit

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/annexd/annexd/store"
)

// Coverage says how much of the index was verified recently.
type Coverage struct {
	Every      time.Duration // the schedule's interval
	Files      int64         // records checked within Every
	Bytes      int64
	Total      int64 // records an audit re-reads
	TotalBytes int64
	Oldest     time.Time // the least recent check
	At         time.Time // when this was counted
}

// minCoverageAge is how long a count of the coverage stands while the
// index does not change. The count reads the whole verified index (about
// a second for 10^6 records): once the index changed it is made again
// when asked, unless the last is younger than ten times what it took,
// or, while the indexer works in bulk (the count changes all the time
// and a status --wait asks twice a second), sixty times.
const minCoverageAge = 2 * time.Second

// refreshCoverage counts the coverage and the problems again, and drops
// the problem entries whose records are gone. The scheduler calls it at
// start and after each run; status asks for a count (freshCounts).
func (c *coverage) refreshCoverage(ctx context.Context) {
	c.countCoverage(ctx)
	if err := c.book.pruneEntries(ctx); err != nil && ctx.Err() == nil {
		c.log.Warn("cannot prune the audit's entries", "err", err)
	}
	c.countProblems(ctx)
}

// coverage counts how much of the index was verified recently, and the
// findings that stand: what status shows and the schedule plans by. Its
// counts are guarded by the Auditor's mu.
type coverage struct {
	st    Store
	roots [][]byte // Options.Roots
	every time.Duration
	log   *slog.Logger
	book  *book
	mu    *sync.Mutex // the Auditor's

	countMu   sync.Mutex // one count of the coverage at a time
	problems  int64      // the findings that stand, as last counted
	countedAt uint64     // book.changes when problems was counted
	// problemsTx is the index's last commit when problems was counted: a
	// record written since may end a finding (an edit) that the book
	// still holds until it is pruned.
	problemsTx uint64
	cover      Coverage
	coverTook  time.Duration // how long counting cover took
	coverTx    uint64        // the index's last commit when cover was counted
	coverBulk  bool          // the indexer worked in bulk when cover was counted
	bulk       func() bool   // the indexer works in bulk now; nil: never
}

// countProblems counts the findings that stand, what Problems lists
// (problemCount); when the index cannot be read, the findings filed.
func (c *coverage) countProblems(ctx context.Context) {
	at := c.book.changes.Load()
	tx, txErr := c.st.Committed() // before counting: a commit meanwhile counts again
	if txErr != nil {
		tx = 0
	}
	problems, err := c.book.problemCount(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("cannot count the audit's findings", "err", err)
		}
		problems = int64(len(c.book.snapshot()))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.problems, c.countedAt, c.problemsTx = problems, at, tx
}

// countCoverage counts the coverage: the records under the roots, and
// those of them checked within Every.
func (c *coverage) countCoverage(ctx context.Context) {
	c.countMu.Lock()
	defer c.countMu.Unlock()
	now := time.Now()
	tx, _ := c.st.Committed() // before counting: a commit meanwhile makes the count look old
	bulk := c.bulk != nil && c.bulk()
	count := func(before int64) (store.CheckedCount, error) {
		if c.roots == nil {
			return c.st.CountChecked(ctx, before)
		}
		return c.st.CountCheckedUnder(ctx, before, c.roots)
	}
	all, err := count(math.MaxInt64)
	var old store.CheckedCount
	if err == nil {
		old, err = count(now.Add(-c.every).UnixNano())
	}
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("cannot count audit coverage", "err", err)
		}
		return
	}
	cv := Coverage{Every: c.every, Files: all.Files - old.Files, Bytes: all.Bytes - old.Bytes,
		Total: all.Files, TotalBytes: all.Bytes, At: now}
	if all.Files > 0 {
		cv.Oldest = time.Unix(0, all.Oldest)
	}
	c.mu.Lock()
	c.cover, c.coverTook, c.coverTx, c.coverBulk = cv, time.Since(now), tx, bulk
	c.mu.Unlock()
}
