// Package mbsha256 computes SHA-256 digests of many streams at once, one
// stream per SIMD lane of a multi-buffer kernel, on the caller's goroutine.
//
// # Basics
//
// New picks the fastest kernel this CPU has for many streams:
//
//   - avx512x16: sixteen lanes in AVX-512 registers (the one that beats
//     crypto/sha256 by about two times when its lanes are full);
//   - shanix2: two streams interleaved through the SHA-NI instructions;
//   - avx2x8: eight lanes in AVX2 registers, picked only on CPUs without
//     SHA-NI, where crypto/sha256 has nothing faster than AVX2 either;
//   - generic: crypto/sha256, one stream at a time (other CPUs and
//     architectures, and builds with the purego tag).
//
// Kernels lists the kernels this machine can run, less those GODEBUG turns
// off (cpu.avx512f=off), and NewKernel asks for one by name, for benchmarks
// and calibration.
//
// An Engine hashes a batch of streams: Hash pulls streams (io.Readers) from
// a function, attaches each to a free lane, reads every lane in chunks of
// ChunkSize bytes, pads each stream with its own length when it ends, hands
// the digest to a callback at once and refills the lane with the next
// stream. Streams of different lengths share the lanes freely. Memory is
// bounded by (Lanes + 2) × ChunkSize (the two SHA-NI finishing lanes below
// included), and at most Lanes streams are in flight, so a next that opens
// each file when asked for it keeps at most Lanes files open. A next with
// nothing to give for now is asked again after each step while streams
// are in flight, so a queue that others fill keeps the lanes busy.
// HashFeed also takes streams already in memory, hashed in place, from a
// feed that can say more is coming (Soon): rather than step with too few
// lanes busy, the engine then waits for it. SumReaders and SumMany are
// conveniences for a slice of readers or byte slices.
//
// Lanes is the engine for callers that read their streams themselves, on
// goroutines of their own: a writer puts each chunk it read, the engine's
// goroutine hashes it in place and hands the buffer back, and a lane
// whose next chunk has not come is parked for a step rather than waited
// for (lanes.go).
//
// When the queue is empty and too few lanes are left busy for the kernel to
// beat crypto/sha256, the streams still in flight move to the two SHA-NI
// lanes when the CPU has them, and the last one is hashed on by crypto/sha256
// resumed from the lane's state, so that a batch's tail keeps at least about
// the speed of hashing the streams one after another. It goes on a slice
// (1 MiB) at a time, and the queue is asked again between slices: a stream
// queued meanwhile joins it in the lanes, so one long file does not keep
// the one-stream rate for the rest of its length. Handing streams largest
// first keeps the most lanes busy while the long ones run.
//
// # Caveats
//
// An Engine is not safe for concurrent use; give each worker goroutine its
// own. It starts no goroutine and holds no timer, so an idle Engine costs no
// CPU. Hash reports the number of bytes each stream produced; checking that
// a file did not change while it was read is the caller's job.
package mbsha256
