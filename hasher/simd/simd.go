// Package simd adds github.com/minio/sha256-simd to the in-process SHA-256
// implementations the hasher's calibration weighs. A program links it
// with a blank import; annexd does, annexctl does not.
package simd

import (
	sha256simd "github.com/minio/sha256-simd"

	"github.com/annexd/annexd/hasher"
)

func init() { hasher.RegisterSIMD(sha256simd.New) }
