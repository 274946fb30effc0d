// Package cliexit turns a command's error into the process's exit status and
// the one line a user sees, the same way for annexd and annexctl.
package cliexit

import (
	"errors"
	"fmt"
	"io"
)

// Error carries the exit status a command wants. A nil Err means the command
// has already told the user why.
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Status returns the exit status for err: 0 for nil, the Code of an *Error
// in its chain, else fallback. It prints the error as "prog: message" on
// stderr unless the *Error carries none.
func Status(prog string, err error, stderr io.Writer, fallback int) int {
	if err == nil {
		return 0
	}
	var e *Error
	if !errors.As(err, &e) {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return fallback
	}
	if e.Err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, e.Err)
	}
	return e.Code
}
