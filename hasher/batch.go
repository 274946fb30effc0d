package hasher

import (
	"context"
	"io"
)

// BatchEngine hashes several SHA-256 streams in one call, for example in the
// lanes of a multi-buffer SIMD kernel. Pool workers call it concurrently, each
// with its own batch. It must not keep goroutines running between calls.
type BatchEngine interface {
	// Name identifies the engine in logs and calibration tables.
	Name() string
	// Lanes is how many streams one call hashes at full speed; the pool
	// gathers up to this many queued files per call.
	Lanes() int
	// HashStreams reads every stream to its end and fills in its Sum, or
	// its Err when reading it failed; one stream's failure must not affect
	// the others. It returns early with ctx.Err() when ctx ends.
	HashStreams(ctx context.Context, streams []*Stream) error
}

// Stream is one file in a batch.
type Stream struct {
	R    io.Reader // yields exactly Size bytes, then io.EOF
	Size int64
	Sum  [32]byte // set by the engine
	Err  error    // set by the engine when reading R failed
}

// streamReader reads a stableFile up to its recorded size; a file that ends
// early reads as a *ChangedError.
type streamReader struct {
	f    *stableFile
	left int64
}

func (r *streamReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.f.read(p)
	r.left -= int64(n)
	return n, err
}
