// Package testutil holds small helpers shared by the tests of several
// packages. Only tests import it.
package testutil

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that a writer (a logger, a child process's
// output goroutine) and a test reading it may use at the same time.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
