// Package hasher turns a regular file that holds still while it is read into
// the digest a git-annex backend computes: the race-safe HashFile, the
// inline/pool/external routing of a Hasher, and the startup calibration that
// chooses the routing cutoffs on this machine.
//
// # Basics
//
// HashFile hashes one file on the caller's goroutine. It refuses anything that
// is not a regular file without opening it in a way that could block (FIFOs,
// sockets, devices, symlinks, directories: ErrNotRegular), and it returns a
// *ChangedError (errors.Is(err, ErrChanged)) instead of a digest when the
// file's identity — device, inode, size, mtime and ctime — is not the same
// before reading (an lstat of the path, matched by an fstat of the open
// descriptor) and after (an lstat of the path). A caller retries such a file later; it never records the digest.
// A caller that knows a path is a regular file (a directory listing says
// so) may Open it instead of stat'ing it; HashOpen then hashes it on any
// route, with the descriptor's fstat as the identity before.
//
// A Hasher applies a Policy: files up to Policy.InlineMax bytes are hashed
// inline, larger ones by a bounded pool of Policy.Workers goroutines, and
// SHA-256 files from Policy.ExternalMin bytes on (when it is not 0) by an
// external program (sha256sum or openssl) that reads the descriptor the
// Hasher holds. With Policy.Batch set (MultiBuffer: the multi-buffer SIMD
// engine of package mbsha256), each pool worker pulls the SHA-256 files
// queued for it into one engine call, a file per lane, and the small ones
// come already read: their callers read them into memory, a few at a time
// per device (Policy.Readers), and check them as HashFile does. When all of
// a device's slots are taken, a caller asks the kernel for its file's data
// before it waits for one. A small file of which the page cache holds
// nothing is read with O_DIRECT (direct.go), sparing the copy out of the
// page cache and the pages a scan would only evict other data with. Callers
// open the large files too, and ask for their start unless it is in the page
// cache, so the disk reads them while they wait for a lane. Reading is thus
// spread over many goroutines while hashing stays one per worker, and many
// callers at once (Streams) keep the lanes full. An engine with a free lane
// waits for files its callers are still reading rather than finish the
// others alone. Idle Hashers cost no CPU: their goroutines block on
// channels.
//
// Calibrate measures the candidates (crypto/sha256, sha256-simd where
// package hasher/simd is linked, the mbsha256 kernels, the external
// programs, the pool hand-off) after checking each on known-answer vectors,
// and derives a Policy, within one second. Throughputs are taken in CPU time,
// which other load on a shared machine disturbs far less than wall time. The
// result carries a Fingerprint of the CPU, the Go runtime, the kernels the
// process may run and the external programs, so a stored Calibration is
// reused until one of them changes (Calibration.StillValid), unless the
// budget cut it short (Calibration.Complete); Overrides applies a config
// file's settings on top. GODEBUG=cpu.avx512f=off runs as a CPU without
// AVX-512 would.
//
// # Durability
//
// A digest names bytes on disk, not only in the page cache: before the
// second stat, the hasher syncs the data of a file that may still be dirty
// (fdatasync on the read-only descriptor it holds), as package
// internal/durable decides, and a failed sync returns its error and no
// digest. Policy.SyncWindow changes the window.
//
// # Caveats
//
// The before/after comparison cannot see a same-size rewrite that lands
// within one tick of the filesystem's timestamp clock; callers that need
// certainty apply the racy-git rule (re-verify records whose mtime is not
// older than the time they were hashed). Files are read with read(2) into
// pooled buffers (directly from the disk for cold small files), never
// mapped.
package hasher
