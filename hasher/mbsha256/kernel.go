package mbsha256

import (
	"fmt"
	"sync"
)

// maxLanes is the widest kernel's lane count; every kernel works on the same
// transposed state layout, word w of lane l at state[w][l].
const maxLanes = 16

// blockFunc hashes nblocks consecutive 64-byte blocks of every lane: lane l
// reads from ptrs[l] and updates the column state[·][l]. Lanes beyond the
// kernel's width are ignored; every lane's pointer must be readable for
// nblocks × 64 bytes.
type blockFunc func(state *[8][maxLanes]uint32, ptrs *[maxLanes]*byte, nblocks int)

// kernel describes one multi-buffer implementation.
type kernel struct {
	name  string
	lanes int
	block blockFunc
	// minLanes is the number of busy lanes below which the kernel is slower
	// than crypto/sha256 on one stream; finishLanes the number below which
	// it is slower than the finisher kernel (see BENCHMARKS.md).
	minLanes, finishLanes int
	// have reports whether the CPU can run the kernel; missing names what
	// it lacks.
	have    bool
	missing string
	// auto reports whether New may pick the kernel: false when this CPU
	// hashes one stream faster with crypto/sha256.
	auto bool
}

// Generic is the name of the crypto/sha256 fallback, which hashes one stream
// at a time.
const Generic = "generic"

// kernels lists the assembly kernels of this build, fastest first, from
// the architecture files' archKernels. The CPU is asked what it has on
// first use, not at program start: a program that links this package but
// hashes nothing (annexctl lookup) runs no CPUID for it.
var kernels = sync.OnceValue(func() []*kernel { return archKernels() })

// Kernels returns the names of the kernels this machine can run, in the
// order New prefers them, ending with Generic.
func Kernels() []string {
	var names []string
	for _, k := range kernels() {
		if k.have {
			names = append(names, k.name)
		}
	}
	return append(names, Generic)
}

// lookup finds a kernel by name; nil with a nil error means Generic.
func lookup(name string) (*kernel, error) {
	if name == Generic {
		return nil, nil
	}
	for _, k := range kernels() {
		if k.name != name {
			continue
		}
		if !k.have {
			return nil, fmt.Errorf("%w: %s needs %s", ErrUnsupported, name, k.missing)
		}
		return k, nil
	}
	return nil, fmt.Errorf("%w: no kernel named %q in this build", ErrUnsupported, name)
}

// finisher names the kernel that finishes a batch's last few streams.
const finisherName = "shanix2"

// finisherKernel returns the kernel that finishes a batch's last few
// streams, nil when this machine has none.
func finisherKernel() *kernel {
	k, err := lookup(finisherName)
	if err != nil {
		return nil
	}
	return k
}
