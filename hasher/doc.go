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
// file's identity — device, inode, size, mtime and ctime, from lstat of the
// path and fstat of the open descriptor — is not the same before and after
// reading. A caller retries such a file later; it never records the digest.
//
// A Hasher applies a Policy: files up to Policy.InlineMax bytes are hashed
// inline, larger ones by a bounded pool of Policy.Workers goroutines, and
// SHA-256 files from Policy.ExternalMin bytes on (when it is not 0) by an
// external program (sha256sum or openssl) that reads the descriptor the
// Hasher holds. With Policy.Batch set (MultiBuffer: the multi-buffer SIMD
// engine of package mbsha256), each pool worker pulls the SHA-256 files
// queued for it into one engine call, a file per lane, and the small ones
// come already read: their callers read them into memory, a few at a time
// per device (Policy.Readers), and check them as HashFile does. Reading is
// thus spread over many goroutines while hashing stays one per worker, and
// many callers at once (Streams) keep the lanes full. An engine with a
// free lane waits for files its callers are still reading rather than
// finish the others alone. Idle Hashers cost no CPU: their goroutines block
// on channels.
//
// Calibrate measures the candidates (crypto/sha256, the mbsha256 kernels,
// the external programs, the pool hand-off) after checking each on
// known-answer vectors,
// and derives a Policy, within one second. Throughputs are taken in CPU time,
// which other load on a shared machine disturbs far less than wall time. The
// result carries a Fingerprint of the CPU, the Go runtime and the external
// programs, so a stored Calibration is reused until one of them changes
// (Calibration.StillValid), unless the budget cut it short
// (Calibration.Complete); Overrides applies a config file's settings on top.
//
// # Caveats
//
// The before/after comparison cannot see a same-size rewrite that lands
// within one tick of the filesystem's timestamp clock; callers that need
// certainty apply the racy-git rule (re-verify records whose mtime is not
// older than the time they were hashed). Files are read with read(2) into
// pooled buffers, never mapped.
package hasher
