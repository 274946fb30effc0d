// Package dedup makes duplicate files found by the index share their
// storage: it plans from the index, checks each pair again, and acts.
//
// # Basics
//
// A plan comes from the index alone (MakePlan, PlanGroup): files with the
// same bare digest on one file system form a group, with one keeper and
// one action for each other inode. Names of one inode are one file. A
// plan needs no file system access, so it is instant. Deduper.Plan adds
// what the caller may see and a survey of extent maps.
//
// # Surveys
//
// A survey (SurveyGroup) reads the extent maps of a group's inodes,
// reading only: the bytes each holds in blocks and holds alone, and
// which inodes share blocks, one physical copy. Holes and what lies past
// the last block count nothing. dups and the planner use this one
// survey: an action frees what its target holds alone, and in reflink
// mode the keeper is the copy holding least alone. A survey of a whole
// group goes to the index, which keeps it until a record of the group
// changes; a run surveys the groups it changed again (Resurvey), since
// sharing blocks changes no record.
//
// Apply carries a plan out. Before each action both files are opened
// again and compared with their records: in the index, by stat (inode,
// size, mtime, ctime), and by the write ledger (no write since hashing).
// A pair that fails is skipped alone, with a Reason; the run goes on.
//
// # Reflink mode
//
// The default. FIDEDUPERANGE shares the keeper's extents with the target.
// The kernel compares the bytes under its own locks, so a mistaken index
// cannot damage a file: different bytes are refused (SkipDiffers), and
// both files go back to the indexer. Both files are opened read-only;
// inodes, timestamps and all other attributes stay as they were. FIEMAP
// tells which targets already share the keeper's blocks (SkipShared), so
// a second run does nothing. A file system without shared extents (ext4,
// tmpfs) fails with an *UnsupportedError that names it and --hardlink.
//
// # Hardlink mode
//
// Only when asked. The target's names become links to the keeper, so
// the names then share one inode and its metadata. A pair is skipped
// unless owner, group, mode and xattrs (ACLs among them) are the same,
// and unless every link of the target is in the plan. A read lease
// refuses a file that any process holds open for writing, and keeps new
// writers waiting while the bytes are compared. Each name is replaced
// through a descriptor of its directory: the keeper is linked under a
// temporary name, exchanged with the name (RENAME_EXCHANGE), and the old
// file removed; the name never goes missing. An intent, durable before
// the first step, lets Recover finish or undo a step a crash cut short.
//
// # Callers
//
// A Request names its Caller. Files the caller cannot read, or that lie
// in directories it cannot search, are left out before planning: the
// plan says nothing about them. Files the caller could not modify itself
// are skipped (SkipPermission). The checks use the mode bits; a file with
// an access ACL grants nothing to a caller who does not own it.
//
// # Continuous mode
//
// Continuous runs reflink passes in the background, only on pairs whose
// files were left alone for a while, paced and paused by Gates.
//
// # Caveats
//
// Paths are opened with RESOLVE_NO_SYMLINKS: a file reached through a
// symlinked directory is skipped (SkipSymlink), even a root given so.
// Hardlink recovery removes a temporary name only while it holds the
// keeper's or the target's inode; a file another process put there stays.
// FIDEDUPERANGE needs Linux 4.5, openat2 Linux 5.6.
package dedup
