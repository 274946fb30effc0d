package mbsha256

import "errors"

// ErrUnsupported is returned by NewKernel for a kernel this CPU (or this
// build) cannot run.
var ErrUnsupported = errors.New("mbsha256: kernel not supported on this machine")

// ErrNilReader is the error of a stream that Hash was handed as a nil
// io.Reader.
var ErrNilReader = errors.New("mbsha256: nil reader")
