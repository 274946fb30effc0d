package cliexit

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func TestStatus(t *testing.T) {
	bad := errors.New("no such file: /x")
	cases := []struct {
		err      error
		want     int
		wantText string
	}{
		{nil, 0, ""},
		{bad, 2, "prog: no such file: /x\n"},
		{&Error{Code: 3, Err: bad}, 3, "prog: no such file: /x\n"},
		{fmt.Errorf("wrapped: %w", &Error{Code: 1}), 1, ""},
	}
	for _, c := range cases {
		var out bytes.Buffer
		if got := Status("prog", c.err, &out, 2); got != c.want || out.String() != c.wantText {
			t.Errorf("Status(%v) = %d, %q; want %d, %q", c.err, got, out.String(), c.want, c.wantText)
		}
	}
	if !errors.Is(&Error{Code: 1, Err: bad}, bad) {
		t.Error("Error does not unwrap to its cause")
	}
}
