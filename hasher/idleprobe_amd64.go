package hasher

import (
	"bytes"
	"encoding/hex"
	"time"

	sha256simd "github.com/minio/sha256-simd"
	"golang.org/x/sys/cpu"
)

func probeAvx512Server() IdleProbeResult {
	if !(cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL) {
		return IdleProbeResult{Unsupported: "CPU lacks AVX-512 F/DQ/BW/VL"}
	}
	srv := sha256simd.NewAvx512Server()
	res := IdleProbeResult{Supported: true, Verified: true}
	for _, v := range sha256Vectors() {
		h := sha256simd.NewAvx512(srv)
		h.Write(v.data)
		want, _ := hex.DecodeString(v.hex)
		if !bytes.Equal(h.Sum(nil), want) {
			res.Verified = false
		}
	}
	time.Sleep(20 * time.Millisecond) // let the hashing settle
	idle, err := measureIdle(idleWindow)
	if err != nil {
		res.Unsupported = "getrusage: " + err.Error()
		return res
	}
	res.IdleCPU, res.WindowMs = idle, float64(idleWindow)/float64(time.Millisecond)
	return res
}
