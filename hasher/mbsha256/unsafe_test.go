package mbsha256

import "unsafe"

func unsafeBytes(p *byte, n int) []byte { return unsafe.Slice(p, n) }
