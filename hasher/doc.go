// Package hasher turns a regular file that holds still while it is read into
// the digest a git-annex backend computes.
//
// HashFile hashes one file on the caller's goroutine. It refuses anything
// that is not a regular file without opening it in a way that could block
// (ErrNotRegular), and returns a *ChangedError (errors.Is(err, ErrChanged))
// instead of a digest when the file's identity (device, inode, size, mtime,
// ctime) before reading is not the one after: the caller retries such a file
// later and never records a digest for it. Before that second look the data
// of a file that may still be dirty is synced (package internal/durable), so
// a digest names bytes on disk. Open and HashOpen spare the lstat of a path
// that a directory listing says is a regular file.
//
// A Hasher routes each file as its Policy says: inline up to InlineMax, to a
// pool of Workers goroutines, to an external program (sha256sum or openssl,
// reading the descriptor the Hasher holds) from ExternalMin, or, with Batch,
// to a multi-buffer engine (package mbsha256) whose lanes hash many SHA-256
// files at once. A worker hands the large files it takes to an engine
// that has free lanes rather than start a second one half empty. Callers
// read the small files for the lanes, a few at a time
// per device (Readers), with O_DIRECT when the page cache holds none of one;
// the disk reads the start of a large file while it waits for a lane: a
// cached one through the page cache, with read-ahead, and one the page cache
// holds none of with O_DIRECT into buffers of huge pages, a chunk ahead of
// the engine (coldstream.go; four at once, 16 MiB of buffers). Streams is how many callers keep the lanes full. An idle Hasher costs no
// CPU. The zero Policy works; package hasher/calibrate measures a better one.
//
// The before/after comparison cannot see a same-size rewrite within one tick
// of the file system's timestamp clock: callers apply the racy-git rule
// (re-verify records whose ctime is not older than their hashing:
// store.RacilyClean). Files are
// read with read(2), never mapped.
package hasher
