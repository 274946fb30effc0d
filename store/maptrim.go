package store

import (
	"bytes"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// mapBudget is how much of the index the writer leaves mapped into the
// process. bbolt reads the index through a map of the file, and each page
// a transaction reads stays mapped: a first scan inserts digests at random
// places, reads most of the index, and the daemon's RSS grew by the
// index's size (37 MiB of the corpus's 60,000 files, 373 MiB at 10^6).
// Those pages are page cache, not the daemon's own memory, but ps, top and
// systemd count them in its RSS, and the kernel keeps mapped pages longer.
// Above the budget, the next write transaction unmaps them from the
// process (MADV_DONTNEED): the page cache keeps them, and a read maps
// them again without I/O. A commit reads back fewer than the budget's
// pages on a small index, so trimming is rare there. At 32 MiB (the
// binary's 18 MiB of text in it) one first scan of the corpus in five
// peaked at 101 MiB of RSS, 60 of them anonymous (bench/memory.sh).
//
// The budget grows by a share of the index (indexShare): a merge of
// random entries reads the index's branch pages again and again, and at
// 10^7 records (about 4 GB) it went past 24 MiB within a few hundred
// entries, so every trim was followed by faulting the same pages back in:
// a third of the end-of-scan merge's CPU (bench/scale.py store, stop 49).
// One sixteenth of the index is 2 MiB more for the corpus, 34 MiB more at
// 10^6 records and 240 MiB more at 10^7.
const (
	mapBudget  = 24 << 20
	indexShare = 16
)

// trimEvery is how many changes a write transaction applies between two
// looks at the map: a group of 4,096 random inserts, or a merge
// transaction of 16,384 entries, would map one page for almost each (the
// corpus's end-of-scan merge mapped 25 MiB before the next transaction
// trimmed it). A look reads /proc/self/statm. Within a transaction the
// map is trimmed only beyond the budget by trimSlack: each trim makes the
// next changes fault their pages in again, and trimming at every look
// cost a first scan of the corpus 8 % more CPU (bench/memory.sh).
const (
	trimEvery = 256
	trimSlack = 6 << 20
)

// mapTrim unmaps the index's pages from the process when more than budget
// bytes of files are mapped (the daemon's binary included). It runs in a
// write transaction, which holds bbolt's writer lock: only a writer remaps
// the file, so the map stays where it is meanwhile. A read that runs at
// the same time finds the same bytes; it only faults them in again.
type mapTrim struct {
	budget atomic.Int64 // tests change it while the writer runs
	share  atomic.Int64 // the budget grows by the index's size over share (indexShare)
	every  atomic.Int64 // changes between two looks (trimEvery; tests lower it)
	slack  atomic.Int64 // over budget within a transaction (trimSlack)
	statm  *os.File     // /proc/self/statm; nil when it cannot be read
	trims  atomic.Int64 // how many times the map was trimmed, for tests
}

func newMapTrim(budget int64) *mapTrim {
	f, _ := os.Open("/proc/self/statm")
	m := &mapTrim{statm: f}
	m.budget.Store(budget)
	m.share.Store(indexShare)
	m.every.Store(trimEvery)
	m.slack.Store(trimSlack)
	return m
}

// fileResident is the process's resident file-backed (and shared) memory
// in bytes, or -1 when it cannot be read.
func (m *mapTrim) fileResident() int64 {
	if m == nil || m.statm == nil {
		return -1
	}
	var buf [128]byte
	n, _ := m.statm.ReadAt(buf[:], 0) // io.EOF with the whole file
	if n == 0 {
		return -1
	}
	// size resident shared text lib data dt, in pages.
	f := bytes.Fields(buf[:n])
	if len(f) < 3 {
		return -1
	}
	pages, err := strconv.ParseInt(string(f[2]), 10, 64)
	if err != nil {
		return -1
	}
	return pages * int64(os.Getpagesize())
}

// trim unmaps tx's index from the process when over budget. tx must be a
// write transaction.
func (m *mapTrim) trim(tx *bolt.Tx) { m.trimAbove(tx, 0) }

// trimAbove unmaps tx's index when over budget by more than slack bytes.
func (m *mapTrim) trimAbove(tx *bolt.Tx, slack int64) {
	if m == nil {
		return
	}
	size := tx.Size() // the file's pages in use: within the map
	if size <= 0 || m.fileResident() <= m.budget.Load()+size/m.share.Load()+slack {
		return
	}
	_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, tx.DB().Info().Data, uintptr(size), syscall.MADV_DONTNEED)
	if errno == 0 {
		m.trims.Add(1)
	}
}

func (m *mapTrim) close() {
	if m != nil && m.statm != nil {
		_ = m.statm.Close()
	}
}
