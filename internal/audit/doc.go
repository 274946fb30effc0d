// Package audit verifies the index against the files on a schedule: it
// reads each file again, least recently verified first, and tells bit rot
// from edits with every witness it has.
//
// # Classification
//
// For each record the audit gathers facts (a fresh lstat before and after
// reading, whether the indexer holds the path, the write ledger's answer,
// the digest read, a second read's digest, the read error) and Classify
// decides:
//
//   - same digest: ok, and the record's VerifiedAt moves on;
//   - a witness of a write: another size, mtime or inode, a write the
//     ledger saw (not a doubt: ledger.Unsure is no write), a racily clean
//     record: modified, handed to the indexer as a normal change. When the
//     ctime moved, or a finding took it, a write the ledger saw at
//     another name of the inode counts (ledger.SinceNames);
//   - no witness, yet the digest differs: the file is read once more,
//     from the device as every read is.
//     The recorded digest then means a transient error (ok, logged).
//     Otherwise the record and its key are kept, flagged, never re-keyed:
//     corrupt when the ctime is the record's too (user space cannot set
//     it, so no write made the bytes); untraced (changed without a trace)
//     when only the ctime moved, once the ledger has caught up with the
//     events queued (Options.SyncWrites) and still saw no write. That is
//     a chmod, chown, link or extended attribute on rotten bytes, or a
//     rewrite that set the mtime back while the daemon was down; the user
//     accepts the new bytes or restores the file;
//   - gone: missing; EIO or EACCES: unreadable; held by the indexer:
//     busy, tried again later.
//
// A file still not ok keeps the class of the finding that stands for it:
// a pass does not turn untraced into corrupt, nor the reverse.
//
// A power cut after an in-place rewrite leaves the old bytes on disk
// under the new, durable mtime and ctime (the journal committed the inode,
// not the data). Stat and the ledger (a new process) see nothing, and the
// reads alone cannot tell it from bit rot. The witness is the shutdown:
// when one that was not clean fell after the record was committed and
// before the kernel would have written the new bytes back (Crashes: the
// index's run marker knows), the audit reports a lost write, not
// corruption. The disk's bytes are the file now: the record takes their
// digest, and the finding stays listed until the user accepts it.
//
// # Findings
//
// A finding (corrupt, untraced, unreadable, lost write) is filed by the
// audit, or by the indexer when it hashes a file again (Found). It stands
// while a record holds it: the flagged record with the recorded digest,
// or for a lost write the record of the bytes on disk. So it goes only
// with an edit, an accept or a heal (the recorded digest read again), not
// with a restart, clean or not, nor a hash of the same bytes. It follows
// its file through renames of the file or its folders, made while the
// daemon runs or while it is stopped: the indexer moves the flagged
// record, and the finding is found under its inode's path now, listed
// there and moved there when the audit prunes its entries. Status counts
// exactly what Problems lists.
//
// # Schedule
//
// A pass verifies every record last checked before the pass began (the
// store's verified index hands them out least recently checked first). A
// verified record moves past that time, a record found not ok gets an
// entry in the index's meta, so a pass resumed after a crash or a pause
// neither misses nor counts a file twice, and nothing but the pass's
// start time says where it is. Passes come every Config.Every, less the
// time the last one took; runs keep to the run windows, a time limit and
// a rate cap, start with a random jitter, and wait while a gate is closed
// (the indexer has work, the load average per CPU is high, the machine is
// on battery). A paused audit stays paused across restarts.
//
// # Reading
//
// An audit is a scrub: it verifies the device, not RAM. Each file is read
// with O_DIRECT (package directio), so the bytes come from the disk even
// where the page cache holds the file, and no page is added to it. The
// kernel writes a range's dirty pages back before a direct read, so a file
// being edited reads as it is; the stat rules then see the edit.
//
// Some files no device can verify. A memory file system (tmpfs) has none.
// Some file systems refuse O_DIRECT (some FUSE and network ones), or may
// answer it from a cache of their own (ZFS). btrfs reads compressed and
// inline extents through the page cache even with O_DIRECT (FIEMAP tells),
// as ext4 does inline data (statx tells). Such files are read through the
// page cache. mincore(2) says which pages it held before each part: a file
// it held none of came from the device. The pages the audit brought in are
// dropped again, so a pass over such a tree keeps the user's cache. The
// others are verified from the page cache only: counted apart by Source,
// in the run, the status and the metrics, never as read from a device. A
// second read drops such a file's pages first.
//
// Each reader runs on a thread of its own in the idle I/O class (honoured
// by the BFQ scheduler; ignored by mq-deadline, kyber and none, where the
// rate cap still holds). Every read is issued by that thread, so the
// class applies to it; a large file is hashed on another goroutine while
// the thread reads its next chunk. In a run at full speed, with a hasher
// that has a multi-buffer engine (hasher.StreamLanes), the large SHA-256
// files go to its lanes: at least a reader for each lane reads its files
// at once (as many as GOMAXPROCS where that is more), each direct read is
// hashed where it lies beside
// the other readers' and its buffer handed back (mbsha256.Lanes), and the
// digest is crypto/sha256's. A paced run hashes one stream a file.
//
// # Parts
//
// Auditor is the front door: it wires its parts and runs the scheduler's
// loop (run.go). The schedule (schedule.go) says when the next run
// starts; the gates (gates.go) and the pacer (pace.go) when and how fast
// a run reads. The checker (check.go) gathers a file's witnesses and
// reads it (read.go), Classify (classify.go) decides, and the recorder
// (act.go) writes the verdict and counts it. The book (book.go) keeps
// the entries and the findings; passes (passes.go, state.go) the pass
// accounting and the state saved; the runs (runs.go) the runs asked for
// and ended; tally and coverage the counts status and the metrics
// (metrics.go) show.
package audit
