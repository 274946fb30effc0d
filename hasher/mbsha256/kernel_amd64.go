//go:build amd64 && gc && !purego

package mbsha256

import "golang.org/x/sys/cpu"

//go:noescape
func blockAVX512(state *[8][maxLanes]uint32, ptrs *[maxLanes]*byte, nblocks int)

//go:noescape
func blockAVX2(state *[8][maxLanes]uint32, ptrs *[maxLanes]*byte, nblocks int)

func init() {
	kernels = append(kernels, &kernel{
		name:     "avx512x16",
		lanes:    16,
		block:    blockAVX512,
		minLanes: 8,
		have:     cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW,
		missing:  "AVX-512 F and BW",
		auto:     true,
	}, &kernel{
		name:     "avx2x8",
		lanes:    8,
		block:    blockAVX2,
		minLanes: 8,
		have:     cpu.X86.HasAVX2,
		missing:  "AVX2",
		// With SHA-NI, crypto/sha256 on one stream is faster than eight
		// AVX2 lanes (see BENCHMARKS.md).
		auto: !hasSHANI(),
	})
}
