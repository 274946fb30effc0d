// Package durable makes sure a digest names bytes on disk, not only in the
// page cache. It says how long written data may stay only in memory
// (DataWindow), what the page cache holds of a file (Cachestat, Dirty),
// and syncs a file's data (Sync), sparing a backlog of files one sync each
// with epochs of their file system. SyncDir syncs a folder whose names a
// step changed (deduplication, the trash) so that a file system that
// cannot have kept the change says so.
//
// The kernel keeps written data in memory for a while, and a power cut then
// loses it while the journal may already hold the file's new mtime and
// ctime: the stat identity matches a key of bytes that are gone. So a
// reader that hashed a file which may still be dirty syncs its data before
// it checks the file's identity again. A file may be dirty when its ctime
// is within DataWindow (MayHoldDirtyData), or when cachestat(2) shows pages
// of it dirty or under writeback. Every write(2) and mmap write fault sets
// ctime, and nothing sets it back, so an older file was written back and
// journaled long ago: DataWindow is the kernel's dirty expiry plus its
// writeback interval plus the journal's commit interval, at least a minute.
// With periodic writeback off, every file is synced.
//
// After EpochAfter files of one XFS, ext4 or btrfs file system were synced
// one by one, an epoch syncs all of it in the background (syncfs(2), then a
// flush of the disk's cache). A file changed more than 10 s before an epoch
// that ended, and clean in the page cache, is on disk and needs no sync of
// its own: a first index of a tree written a while ago pays about one
// epoch, not one sync a file.
//
// What no sync here can see: writeback that lags past the window on a
// kernel without cachestat (before 6.5), or for a file the process neither
// owns nor may write; a disk or mount that ignores cache flushes
// (nobarrier, a lying write cache); a write error already reported to
// another opener of the file; a single write(2) call that dirties pages
// for more than 10 s, which an epoch may not cover. The index backs these
// up: after an unclean end it re-verifies the keys hashed just before it
// (store.Trusted).
package durable
