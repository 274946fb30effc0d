// Package calibrate measures the ways of hashing SHA-256 on this machine and
// returns the hasher.Policy that follows from them, within a time budget
// (DefaultBudget, one second).
//
// Run checks each candidate on known-answer vectors (crypto/sha256,
// sha256-simd where package hasher/simd is linked, the mbsha256 kernels, the
// external programs), measures the ones that pass, the read size and the
// worker pool's hand-off, and derives the Policy, with a note on why for
// each field. Throughputs are taken in CPU time, which other load on a
// shared machine disturbs far less than wall time. A Calibration carries a
// Fingerprint of the CPU, the Go runtime, the kernels the process may run
// and the external programs, so a stored one is reused until one of them
// changes (StillValid), unless the budget cut it short (Complete). It
// marshals to JSON with stable field names: the daemon keeps it in the
// index. Overrides applies a config file's settings on top.
// GODEBUG=cpu.avx512f=off runs as a CPU without AVX-512 would.
package calibrate
