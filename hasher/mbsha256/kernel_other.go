//go:build !amd64 || !gc || purego

package mbsha256

// archKernels: this build has no assembly kernels, only Generic.
func archKernels() []*kernel { return nil }
