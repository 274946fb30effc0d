// Package indexer keeps the index true: it takes paths from tree walks and
// from the watcher, decides for each whether its stored record still
// describes the file, has the hasher hash the ones that changed, and writes
// the results to the store.
//
// # Basics
//
// A record is current when the file's (dev, ino, size, mtime_ns, ctime_ns)
// from a fresh lstat equal the record's, its state is ok, and it is not racily
// clean. A record is racily clean when the file's ctime is not older than the
// time its hashing started, within the file system's timestamp granularity: a
// write in that same timestamp tick would leave the stat identity unchanged
// (a write sets the ctime, which user space cannot set; the mtime it can, to
// the future or back after a copy, and says nothing here), so such a
// record is re-verified the next time the path is checked (git's
// racy-git rule). A record hashed just before a run ended without closing
// the index is re-verified the same way (store.Trusted): a power cut may
// have kept its file's new stat identity and lost the bytes it was hashed
// from.
//
// # Other bytes
//
// Uncertainty is not an edit. A file hashed again is held against the
// record it had: its own, or its inode's under another name (a hard link,
// a rename not taken over). judge decides, from facts gathered once:
//
//   - the same digest, a new size, mtime or inode, a write the ledger saw
//     (ledger.Written), or a racily clean record: the new digest is the
//     key. So is a write seen at another name of the inode when the
//     ctime moved, or a finding took it (a write through any name moves
//     the ctime the names share);
//   - otherwise the key stays and the record is flagged corrupt. With
//     the ctime unchanged no write made the bytes: corrupt (a lost write
//     when an unclean end may have kept them from the disk, and then the
//     record takes them). With only the ctime moved (a chmod, a chown, an
//     extended attribute, a link, or a rewrite that set the mtime back
//     while nothing watched) the change left no trace: untraced.
//
// A doubt of the ledger (ledger.Unsure) is no witness. Before it judges a
// change without a trace, the checker waits for the ledger to read the
// events queued (Watches.Sync); while the watcher still sets up its
// watches it tries again later. Options.OnFinding hears of each finding:
// the audit lists it until an edit, an accept or a heal. A file whose stat
// identity, ctime included, is its record's is not hashed on a doubt: no
// write can have changed it.
//
// The indexer is split by job, each part a small type:
//
//   - the pipeline (pipeline.go): one bounded queue to a few workers, the
//     set of paths in flight and the writes. A path is in it at most once:
//     an event for a path already queued or being hashed asks for one more
//     check afterwards, so one change is hashed once. Writes go to the
//     store asynchronously, a bounded number at a time, and a path leaves
//     the pipeline once its write is durable;
//   - the checker (check.go): what a worker does with one path. It
//     gathers a file's facts once (facts.go: the record, the shelf, the
//     ledger's word) and a pure decideFile says what they call for: it
//     settles a path whose record still holds, hands a file without a
//     record to the renamer, hashes the rest, and drops what is gone;
//   - the scanner (scan.go): walks, generations and sweeps;
//   - the renamer (rename.go): renames and hard links, decided by a pure
//     function over facts gathered once;
//   - the feed (follow.go): the hand-off of the watcher's events, and the
//     one Idle that counts what is still on its way.
//
// Each part is built with the parts it hands work to; none is wired
// after. Data goes one way: feed, queue, checker, writes. What the
// indexer needs of the watcher's set-up is one interface it declares
// (Watches); deduplication declares what it needs of the indexer
// (dedup.Indexer).
//
// A file that changes while it is hashed is retried with backoff and never
// recorded with the digest of a moving target. An unreadable file gets a
// record in state unreadable. It keeps the digest of the last content known
// good when no witness saw a change but ctime (a chmod), so audits re-try it.
//
// # Scans and generations
//
// Every walk of a root or subtree gets a new scan generation, and records
// written while it runs carry it. The walk remembers the paths it saw as
// 64-bit hashes, so an unchanged file costs a look-up and no write. The set
// takes 8 bytes a file, up to 4 Mi paths (32 MiB) a scan, and two scans run
// at once; beyond the cap, unchanged records are marked in the store
// instead, a write each (a tree of 10^7 files holds 32 MiB for the set
// while it is walked and marks the other 6 million records). A walk into
// an empty index, which hashes every file, stats none of the files whose
// type the directory gives: the checker opens each (hasher.OpenAt, through
// a descriptor of its directory that dirFds keeps while the pipeline is
// busy) and takes its identity, and its size for the scan's totals, from
// the descriptor; the lstat of the full path after reading still decides
// what was read.
// Until then the file counts in the walk's files but not yet in its bytes
// or in the pipeline's queued bytes. The first scan of a root also runs a
// counting walk for its progress (expect.go), which stats every file long
// before the scan's walk reaches it; it queues the first 64 files of 16
// MiB or more ahead of the walk, so that their long streams share the
// hasher's lanes with the small files instead of being hashed alone at the
// end. The walk meets them later and finds them settled. Both walks call
// Watches.WaitWatched before they read a directory: the daemon's first scan
// starts beside the watcher's set-up of its watches and reads each
// directory once it is watched (watcher.Watcher.WaitWatched), so a
// change made after the read is an event. When the walk
// finished and every path it queued has settled, the records under the
// walked directory with an older generation whose paths it did not see
// belong to files that no longer exist, and the sweep drops them. Records
// under a directory the walk could not read are kept; a walk that failed
// otherwise, met more than 1,024 unreadable paths, or found a root empty
// while the index has records under it sweeps nothing. So a transient error
// or an unmounted disk never deletes records. A directory moved into the
// walked tree while the walk runs keeps its records' old generations and
// may arrive after the walk read its new parent, and one that comes back
// from outside the roots brings no write at all. So the sweep looks before
// it deletes: a record whose regular file is there, reached from the walked
// directory without a symlink, stays; and the sweep deletes behind a store
// sweep fence, which skips a path that a change or a walk touched after
// that look.
//
// # Removals
//
// A path the watcher reports removed is dropped only after a short delay and
// a fresh lstat, so that a rename reported as "removed here, created there"
// keeps its records (and keys) by moving them instead of re-hashing. A path
// found gone can be back before its drop lands, with records that a
// directory move brought or a walk kept, neither waiting for the path's
// place in the pipeline: the drop raises a store fence, looks once more,
// and deletes behind the fence, and a fence broken meanwhile sends the path
// to be checked again instead.
//
// # Renames
//
// A directory the watcher saw renamed (a Moved event) takes its records
// along in one store move, which merges: records already under the new
// name stay, and nothing there is deleted. Its new name is then walked.
// A file without a record takes the record kept for its inode under
// another path when the facts allow it (decide), in one checked store
// change: a record that changed since it was read fails the change, and
// the facts are read again. A doubt of the ledger keeps a renamed file
// from taking a key: it is hashed, and held against that record. A
// record flagged by an audit claims no key for the bytes, so it follows
// its renamed file on a doubt too, and its finding with it; only a write
// seen keeps it back. It is never copied to a new hard link. A file that moved with a directory the
// watcher could not pair has its whole old directory's records moved at
// once. So no lock orders renames, and a record written under a new name
// meanwhile is never lost.
//
// # File systems away
//
// A record names its file system by an id that survives reboots and
// renumbered devices (fsstat). A record read with a device number, from an
// index before those ids, holds for the file system that has that number
// now, and is written back with its id. A file system can be away: a disk
// unplugged or unmounted while its mount point stays, or another disk
// mounted in its place. Its records are not dropped, and another disk's
// file at their path shelves them instead of replacing them; they come
// back, without a hash, when their file system does. filesystems.go has
// the rule.
//
// # Caveats
//
// A rename is recognised by (dev, ino, size, mtime). A rename changes ctime,
// so ctime cannot be compared. Where the file system keeps birth times, a new
// file in a reused inode is told apart by being born after the record's
// ctime; elsewhere, a new file that reuses a deleted file's inode, size and
// mtime (to the nanosecond) would take over its key.
//
// A rewrite that sets the mtime back (rsync --inplace -t, some backup
// tools) follows the write ledger's rule, stated in internal/ledger: a path
// written since its record was hashed is hashed, and a renamed file takes
// no record hashed before a write to its old path, new path or inode, nor
// one from an old path still waiting to be hashed. A file whose ctime is
// still the record's moved with its directory and keeps its key. Made
// while the daemon runs, such a rewrite is a write the ledger saw: an
// edit. Made while it was down, nothing saw it: the file is untraced, and
// the user accepts the new bytes (annexctl audit accept). So is one made
// in the moment between a directory's rename and the watch of its new
// name, which no watch sees.
// Hard links share one ctime, so one name takes another's record only when
// that record's ctime is the inode's ctime now, and a renamed file with
// other names is hashed. A write reported for one name queues the other
// recorded names of the inode for a check (inotify reports it for that
// name alone), and no name takes a record while another name of its inode
// waits in the pipeline. A write the watcher could not tie to an inode
// (the name had moved or gone before it read the event) is known by that
// name alone: the other names ask the ledger about it (ledger.SinceNames)
// before they keep a key, even once its record is gone. What is left: a file rewritten that way and
// renamed while the daemon was down keeps its old key (no event and no
// stat field tells), until it changes again or an audit reads it and
// lists it corrupt. So does one
// rewritten and renamed just before the daemon stopped, while the write
// had not reached the index yet (the ledger's memory of it does not
// outlive the process), and one moved out of the roots, rewritten there
// and moved back under another name before the records of its old name
// were dropped (a few seconds: nothing watches it outside).
//
// # Idle
//
// Idle reads, in this order, what the watcher holds back, the events it
// sent that Follow has not handed over, and the indexer's walks, removals
// and pipeline. Work moves the same way, so nothing on its way is missed.
// WaitIdle wakes when a part finishes its work; only while the watcher
// holds changes, which it announces to nobody, does it look again on a
// timer.
//
// # Freshness
//
// Lookup never returns a key that may be stale as current: it compares the
// record with a fresh lstat and, when they differ, hashes the file on demand
// (bounded), waits for the pending work, or reports the path as pending.
package indexer
