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
// Only when asked. The copy's name becomes a link to the keeper, so the
// names then share one inode and its metadata. Nothing another process
// does to either file is lost or moved to the other name, whatever the
// timing; what cannot be made so is refused:
//
//   - a pair is skipped unless owner, group, mode and xattrs (ACLs among
//     them) are the same, the copy has one name, and every link of the
//     keeper is a name the index holds inside the roots and outside
//     git-annex's object store (an annex.thin object or a name outside
//     the roots would change with the copy); an immutable or append-only
//     file or folder is refused before anything is made;
//   - the copy gets a write lease, which the kernel grants only while no
//     other process holds it open at all, and the keeper a read lease
//     (nobody holds it open for writing); from then on, a process that
//     opens the copy, or opens the keeper for writing, or truncates
//     either, waits on the lease, and the lease shows it;
//   - the bytes are compared under the leases; the keeper is linked under
//     a temporary name in the copy's folder, both files are checked again
//     (lease, stat, xattrs, link counts), and the names are exchanged
//     (RENAME_EXCHANGE), so the name never goes missing and the old copy
//     stays linked under the temporary name;
//   - the old copy stays there for Grace (50 ms): a process that looked
//     the name up before the exchange and opens, chmods, chowns, links or
//     tags the old copy after it shows in the lease or in its stat. Then
//     the step is settled (decide): an untouched old copy is removed; a
//     touched one is put back at the name (the pair is skipped, raced),
//     its opener's write landing there; when the keeper was touched
//     through the name since the exchange too, the name keeps the keeper
//     and the old copy is kept beside it, visibly (NAME.annexd-kept-ID).
//
// An intent, durable before the link, records both files' bytes (digest),
// owner, group, mode, xattrs and link counts. Recover settles a step a
// crash cut short by the same rule, from what is at each name now, found
// by inode numbers in the step's folder (never by st_dev, which a reboot
// may change), the folder found by its inode or, renamed while the daemon
// was down, by the temporary name under the roots. A step the kernel will
// not let it settle (a folder made append-only meanwhile) keeps its
// intent, is reported, and is tried again by the next recovery; it stops
// no other pair. The daemon never indexes the temporary names
// (TempPattern), so the watcher takes no event on them for a write.
//
// What a lease cannot see is a process that resolved the copy's name
// before the exchange and reaches the inode more than Grace after it: a
// lookup held up that long between finding the name and opening the file
// (a process stopped or starved there), or an O_PATH handle used later.
// Its write goes to the removed old copy, as with any program that
// replaces a file by rename; when the removal itself sees one, it is
// logged as an error. Every process that opens the copy after its lookup
// within Grace, and every one that starts after the exchange, is safe.
//
// # Trash mode
//
// Only when asked. Each copy is moved to the freedesktop.org trash of its
// file system (package trash), where any file manager can restore it,
// for file systems that cannot share blocks (ext4) and for people who
// would rather have one copy. The checks are hardlink mode's: the copy
// has one name, the caller could modify it and remove its name, nothing
// refuses it (chattr), it gets a write lease (nobody holds it open) and
// the keeper a read lease (nobody writes it), and the bytes are compared
// under the leases. An intent naming the trash is durable before the
// .trashinfo file is written; the copy is checked once more and renamed
// into the trash. Recover keeps a move whose copy is in the trash and
// removes the info file of one that did not happen: after a crash the
// copy is at its name or in the trash with its info, never neither. The
// index learns the copy is gone (Rehash); the daemon never indexes a
// trash folder (TrashPatterns).
//
// # Keepers
//
// PlanOptions.Keep picks the copy that stays in each group: the newest,
// the oldest, the one with the shortest path, or one under a folder (and
// then every copy there stays). Its ties, and plans without a rule, go by
// the default order (PlanGroup). The rule works in every mode.
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
// files were left alone for a while, paced and paused by Gates. A pair
// the kernel refuses (a btrfs nodatacow file, a copy truncated while it
// was shared) is counted and logged and stops only itself; only the probe
// of a file system can leave the whole of it alone. A copy shared in part
// before it changed is reported with the bytes already freed.
//
// # Caveats
//
// Paths are opened with RESOLVE_NO_SYMLINKS: a file reached through a
// symlinked directory is skipped (SkipSymlink), even a root given so.
// Hardlink recovery removes a temporary name only while it holds the
// keeper's or the target's inode; a file another process put there stays.
// Each copy relinked waits Grace, so a hardlink run links at most about 80
// copies a second with four workers. FIDEDUPERANGE needs Linux 4.5,
// openat2 Linux 5.6.
package dedup
