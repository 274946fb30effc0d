package mbsha256

import (
	"encoding/binary"
	"math/bits"
)

var k256 = [64]uint32{
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}

// refKernel is a plain Go multi-lane kernel with the same contract as the
// assembly ones. It lets the lane scheduling be tested on any machine.
func refKernel(lanes int) *kernel {
	return &kernel{name: "ref", lanes: lanes, block: func(state *[8][maxLanes]uint32, ptrs *[maxLanes]*byte, nblocks int) {
		for l := 0; l < lanes; l++ {
			data := unsafeBytes(ptrs[l], nblocks*64)
			for b := 0; b < nblocks; b++ {
				refBlock(state, l, data[64*b:64*b+64])
			}
		}
	}, have: true}
}

// refBlock is a test fixture, not code under test: the race detector's
// checks of its array accesses made it most of this package's test time.
//
//go:norace
func refBlock(state *[8][maxLanes]uint32, l int, p []byte) {
	var w [64]uint32
	for t := 0; t < 16; t++ {
		w[t] = binary.BigEndian.Uint32(p[4*t:])
	}
	for t := 16; t < 64; t++ {
		s0 := bits.RotateLeft32(w[t-15], -7) ^ bits.RotateLeft32(w[t-15], -18) ^ w[t-15]>>3
		s1 := bits.RotateLeft32(w[t-2], -17) ^ bits.RotateLeft32(w[t-2], -19) ^ w[t-2]>>10
		w[t] = w[t-16] + s0 + w[t-7] + s1
	}
	a, b, c, d, e, f, g, h := state[0][l], state[1][l], state[2][l], state[3][l], state[4][l], state[5][l], state[6][l], state[7][l]
	for t := 0; t < 64; t++ {
		t1 := h + (bits.RotateLeft32(e, -6) ^ bits.RotateLeft32(e, -11) ^ bits.RotateLeft32(e, -25)) + (e&f ^ ^e&g) + k256[t] + w[t]
		t2 := (bits.RotateLeft32(a, -2) ^ bits.RotateLeft32(a, -13) ^ bits.RotateLeft32(a, -22)) + (a&b ^ a&c ^ b&c)
		h, g, f, e, d, c, b, a = g, f, e, d+t1, c, b, a, t1+t2
	}
	for i, v := range [8]uint32{a, b, c, d, e, f, g, h} {
		state[i][l] += v
	}
}
