package mbsha256

import "errors"

// ErrUnsupported is returned by NewKernel for a kernel this CPU (or this
// build) cannot run.
var ErrUnsupported = errors.New("mbsha256: kernel not supported on this machine")
