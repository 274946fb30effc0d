// Package store is annexd's index: a bbolt file mapping every path to the
// record of its content, with the secondary indexes, batched writes, queries,
// schema versions and invariant checks around it. It is the only package that
// imports bbolt; callers see concrete methods and copied values, never a
// transaction.
//
// # Glossary
//
//   - path: an absolute, clean file path as raw bytes (non-UTF-8 names are
//     kept byte for byte).
//   - record: what the index knows about one path: digest and backend, size,
//     mtime, ctime, (dev, ino), when it was hashed and last verified, its
//     state and generation. Encoded compactly (versioned, varints).
//   - digest: the hash of a file's content. Digests are grouped by base
//     backend (SHA256E and SHA256 share SHA256's space), so a.JPG and b.jpg
//     with the same bytes have the same bare digest even though their E keys
//     differ; keys are derived from digest, size and the path's extension on
//     output.
//   - state: ok, unreadable, changing (changed while hashed, to be retried),
//     corrupt (content changed although size and mtime did not; the recorded
//     digest is kept), pending. Only ok records are in the digest index.
//   - generation: a number handed out per scan (NextGeneration). A scan marks
//     the paths it sees with its generation, or remembers them itself; Sweep
//     then drops the records below the scanned directory that it did not see.
//   - group: the paths sharing one bare digest on at least two distinct
//     inodes. Its duplicate bytes are size × (distinct inodes − 1):
//     hardlinks of one inode are members but are not duplicates.
//   - survey: what a look at a group's extent maps found (internal/dedup
//     makes it): the bytes each inode holds in blocks and holds alone,
//     and which inodes share blocks (one physical copy). Kept until a
//     record of the group changes.
//   - reclaimable: what making the copies on each file system share one
//     copy's blocks gives back, by the survey: the blocks held alone,
//     less the keeper's. Shared blocks, holes and hard links count
//     nothing.
//   - cursor: opaque bytes that resume Dups where it stopped.
//   - file system id (Dev): the file system a record's file is on, as
//     fsstat names it: from its UUID, not its device number. Indexes
//     before file-system ids stored device numbers, which the indexer
//     upgrades when it meets the file (fsstat.Legacy).
//   - shelf: the records of a file system that another one has replaced at
//     their paths (a second disk mounted where the first was), kept by
//     file system and path until it is back (shelf.go).
//   - identity: what lstat tells of a file (dev, ino, size, mtime, ctime). A
//     record's digest describes the file only while the identities match.
//   - run marker: what the writer keeps in meta about itself: when it
//     opened the index, when it last committed, the boot id, and whether it
//     closed the index. Every commit stamps it; Close marks it clean.
//   - suspect: a record hashed within the data window before the last
//     commit of a run that did not close the index, or before the machine
//     restarted. A power cut may have kept its file's new stat identity and
//     lost the bytes it was hashed from. Suspect lists the spans of HashedAt;
//     Trusted is false for such a record, and the indexer hashes it again.
//   - checked time: when a record's content was last confirmed, by an
//     audit (VerifiedAt) or by hashing (HashedAt).
//   - conditional put: a write applied only while the stored record is
//     still the one it was made from (OpPutIf, PutIf); else ErrConflict.
//
// # Layout
//
// Buckets: files (id(dirID) ‖ base name → record), dirs (directory
// "/a/b/" → id(dirID)) and dirnames (id(dirID) → directory), bydigest (base
// backend ‖ digest ‖ file key → the record's backend, device and inode),
// inodes (id(dev) ‖ id(ino) ‖ file key → ∅), groups (base backend ‖
// digest → paths, inodes, size; only for digests
// with two or more paths), dups (^duplicate bytes ‖ base backend ‖ digest
// → the same summary; only for groups of two or more inodes, so Dups
// streams them most duplicate bytes first), surveys (the group's key in
// dups → its survey, so Dups reads them in step), verified (be64(checked time) ‖ file key → size;
// the records an audit re-reads, least recently confirmed first: see
// ByChecked), pending (be64(run) ‖ digest key ‖ file key → a digest
// entry not yet merged) and pendinodes (be64(run) ‖ id(dev) ‖ id(ino) ‖
// file key → ∅, its inode entry; see below), meta (format, schema version, counters, generation) and user
// (GetMeta/PutMeta). With Options.Changes, changes holds the change log
// that a hub follows (changes.go); feed holds the change feed, kept
// unless Options.Feed turns it off (feed.go).
//
// id(n) is one byte counting n's significant bytes, then those bytes
// big-endian (schema 2): it sorts as the numbers do, so a first scan, which
// hands out directory ids in walk order and often meets inode numbers in
// increasing order, appends to the files, dirnames and inodes indexes
// instead of inserting all over them, and the writer then fills their pages
// completely (bbolt's default leaves appended pages half empty). Schema 1
// stored these as little-endian varints; Open migrates such an index by
// copying it into a new file in chunks, checking and syncing the copy and
// renaming it over the old file (a read-only open reports
// ErrNeedsMigration instead; every step is in store/internal/migrate).
// Schema 3 added the verified index; Open builds it in place from the
// records of a schema-2 index, in chunks, and sets the new version last. Schema 4 added the pending bucket. Schema 5
// fills the bydigest values, which were empty, the way schema 3 was built;
// with them Dups can list a group's members without reading their records
// (DupOptions.Brief). Schema 7 adds the shelf (be64(dev) ‖ path → record).
// Schema 6 keys the pending bucket by run and adds the
// pendinodes bucket; Open rewrites a schema-5 pending bucket, at most a
// merge's worth of entries, as one run in one transaction. Schema 7 adds
// the surveys bucket, empty, and three counters. Schema 8 adds a record
// state, untraced (StateUntraced), which an annexd of schema 7 would take
// for damage; the step from 7 writes the new version only, and the audit
// moves each untraced finding's record to the new state when it starts.
//
// Storing directories once and files under a directory id keeps the index
// small (each path's directory is not repeated in three indexes) and makes
// renaming a directory cost one entry per directory below it, not one per
// file. A directory entry exists exactly while it holds files.
//
// The inode index maps one (dev, ino) to every path recorded with it, so
// hardlinks are all found (ByInodeAll).
//
// # Writes
//
// A survey is kept only while it is true of the records: PutSurvey
// checks each record of the group against what the survey saw of its
// file, and every change that touches a group (a member put, removed,
// moved, or written again with the same content) drops its survey in the
// same transaction. Sharing that changes no record (FIDEDUPERANGE) is the
// caller's to report (DropSurvey, or a new survey).
//
// Every change goes through one writer, Run, which applies queued changes in
// one transaction per group: every Options.MaxDelay (100 ms) or
// Options.MaxBatch (4096) changes, whichever comes first, or as soon as no
// change arrived for Options.MaxIdle (1 ms), so a lone change is not held
// back; while the caller works in bulk (SetBulk), Options.BulkIdle (20 ms)
// instead. Groups shrink while their commits touch more than
// Options.MaxGroupNodes tree nodes (group.go). Put and the other
// synchronous calls return after the commit (fsync), so a change that
// returned nil survives a crash; Submit is the asynchronous form, SubmitAll
// waits for a batch. All indexes and counters
// change in the same transaction as the record.
//
// Digests are random, so a first scan's digest entries would land on
// random leaves and each commit would rewrite about one page per change.
// A group of deferMinGroup (512) changes or more therefore appends its new
// digest entries, and their inode entries, to the pending buckets as one
// sorted run; the writer merges them in key order once as many entries are
// pending as are merged (from 16,384 on) or 512 runs wait, when it has been
// idle for 100 ms, and before Dups or a Settle. Until then such a record
// counts in Digested but not in Unique, DupGroups and Duplicate
// (Stats.Ungrouped says how many), and ByDigest and ByInodeAll seek in
// every run as well (ByInodeAll not when the inode filter proves no run
// names the inode). pending.go, pendinodes.go and runfilter.go have the
// details.
//
// Changes are applied in the order they were submitted, and reads see only
// committed changes. A caller that reads, decides and then writes may
// therefore miss a change still queued. Move and Adopt close that gap: a
// move never deletes a record (it merges, and what is in its way stays
// put), and an adoption checks what its caller read in the transaction
// that makes the change, failing with ErrConflict when it changed. A drop
// of what a caller found gone closes it with a fence (Fence, DropFenced):
// raised before the caller looks again, broken by any change applied since
// that brings a record at, under or above its path, and by a caller about
// to read a record there that it may keep without a write (Saw); a broken
// fence's drop changes nothing and fails with ErrConflict. Saw waits while
// a fenced delete covering its path is applied but not committed, so the
// read after it sees the delete. A sweep does the same per path behind one
// fence on its directory (SweepFenced). fence.go has the details.
//
// # Shutdown
//
// Open (for the daemon, not for check-db or Compact) reads the run marker
// the last writer left and writes its own, not clean. From the last one it
// derives the suspect spans, fixed for this run: the last run's own, and
// [last commit − its data window, last commit] when the boot id changed
// since, or the last run did not close the index and a mount its records
// of that window were hashed on may have lost their writes (kept.go). The spans are kept in every later
// marker, so a record that was never hashed again stays suspect through
// clean runs (up to eight spans, the closest merged). An index last
// written by a version without the marker has nothing suspect.
//
// # Reads
//
// Get, ByInodeAll, ByDigest and Stats are short read transactions. GetMany
// looks up a batch of paths (the files of one directory, say) in one read
// transaction and with one cursor, several times cheaper per path than Get
// because bbolt's cost of beginning a transaction dominates a single
// lookup. Get finds a path's directory id through a cache; long reads cache
// directory names.
// Both caches are tied to an epoch that the writer advances around every
// transaction that renames or removes a directory, so a read never mixes a
// cached mapping with a snapshot it does not belong to. Subtree,
// Sweep, Forget and Dups read in chunks of about a thousand records, each
// in its own transaction, and call the caller's function outside of it, so
// a long listing never stalls the writer and the callback may write.
//
// # Caveats
//
// A file that is not an index, or a damaged index, is never written,
// truncated or removed: Open reports ErrNotIndex or ErrCorrupt naming it.
// Open checks what it can without reading every page: both meta pages,
// the freelist, every branch page and a sample of each bucket's leaves,
// which must decode and agree with the counters. A read or a write that
// meets damage later returns ErrCorrupt and closes Damaged; from then on
// the store refuses writes. MoveAside renames a damaged index, keeping it,
// and puts an empty one in its place.
//
// When the file system holding the index is full, the writer commits what
// fits, holds the rest and tries again once there is room (Backlog);
// whoever submits waits meanwhile. Only a writer told to stop gives the
// changes it holds up, with ErrNoSpace.
// Check (annexd check-db) blocks writes while it runs. Changes submitted
// but not yet committed are not visible to reads.
//
// Copy-on-write leaves free pages behind, most after a first scan (every
// group rewrites most pages of the digest and inode indexes); later groups
// reuse them. Compact rewrites an index that is not open elsewhere into a
// new file of live, full pages, checks it, syncs it and renames it over
// the old one; Open makes sure the file it locked is still the one at the
// path, so an opener that waited for the old file's lock is not left with
// the replaced file.
//
// # Parts
//
// Store is the front door; its parts are types of their own, each with its
// fields, whose methods are the Store's where it embeds them: reader
// (read.go: the file, its caches and the queries), changeLog (changes.go),
// runMarker (shutdown.go), hold (nospace.go: the writer's wait for space),
// fenceSet (fence.go) and deferred (pending.go: the deferred runs). Store
// itself keeps the writer: the queue, its groups and their transactions.
// A write transaction (wtx) keeps the indexes consistent; txRuns,
// txVerified and txSurveys are its side of the deferred runs, the verified
// index and the surveys. Package store/codec is the byte layout (the
// hub's view shares it); store/internal/pagecheck reads bbolt's pages with
// pread for the check at open and for MoveAside.
package store
