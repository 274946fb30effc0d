//go:build amd64 && gc && !purego

package mbsha256

import "golang.org/x/sys/cpu"

//go:generate go run ./internal/gen/main.go

//go:noescape
func blockAVX512(state *[8][maxLanes]uint32, ptrs *[maxLanes]*byte, nblocks int)

//go:noescape
func blockSHANIx2(dig *[2][8]uint32, p0, p1 *byte, nblocks int)

// blockSHANI2 runs blockSHANIx2 on lanes 0 and 1 of the transposed state.
func blockSHANI2(state *[8][maxLanes]uint32, ptrs *[maxLanes]*byte, nblocks int) {
	var dig [2][8]uint32
	for w := range 8 {
		dig[0][w], dig[1][w] = state[w][0], state[w][1]
	}
	blockSHANIx2(&dig, ptrs[0], ptrs[1], nblocks)
	for w := range 8 {
		state[w][0], state[w][1] = dig[0][w], dig[1][w]
	}
}

//go:noescape
func blockAVX2(state *[8][maxLanes]uint32, ptrs *[maxLanes]*byte, nblocks int)

func archKernels() []*kernel {
	return []*kernel{{
		name:  "avx512x16",
		lanes: 16,
		block: blockAVX512,
		// Measured: 6 busy lanes run at 0.8× crypto/sha256, 7 at 1.0×,
		// 8 at 1.14× (below shanix2's 1.2×), 9 at 1.3×.
		minLanes:    7,
		finishLanes: 9,
		have:        cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW,
		missing:     "AVX-512 F and BW",
		auto:        true,
	}, {
		name:     "shanix2",
		lanes:    2,
		block:    blockSHANI2,
		minLanes: 2, // one busy lane runs at 0.6× crypto/sha256
		have:     hasSHANI() && cpu.X86.HasAVX && cpu.X86.HasSSE41 && cpu.X86.HasSSSE3,
		missing:  "SHA-NI, AVX, SSE4.1 and SSSE3",
		auto:     true,
	}, {
		name:  "avx2x8",
		lanes: 8,
		block: blockAVX2,
		// An estimate for CPUs without SHA-NI, where crypto/sha256 uses
		// AVX2 on one stream; not measured on such a machine.
		minLanes: 4,
		// Slower than shanix2 with all lanes busy.
		finishLanes: 9,
		have:        cpu.X86.HasAVX2,
		missing:     "AVX2",
		// With SHA-NI, crypto/sha256 on one stream is faster than eight
		// AVX2 lanes (see BENCHMARKS.md).
		auto: !hasSHANI(),
	}}
}
