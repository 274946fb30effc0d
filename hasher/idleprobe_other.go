//go:build !amd64

package hasher

func probeAvx512Server() IdleProbeResult {
	return IdleProbeResult{Unsupported: "sha256-simd's Avx512Server exists only on amd64"}
}
