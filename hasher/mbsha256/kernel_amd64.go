//go:build amd64 && gc && !purego

package mbsha256

import "golang.org/x/sys/cpu"

//go:noescape
func blockAVX512(state *[8][maxLanes]uint32, ptrs *[maxLanes]*byte, nblocks int)

func init() {
	kernels = append(kernels, &kernel{
		name:     "avx512x16",
		lanes:    16,
		block:    blockAVX512,
		minLanes: 8,
		have:     cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW,
		missing:  "AVX-512 F and BW",
	})
}
