package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// humanBytes formats n bytes with binary prefixes: "512 B", "1.5 KiB",
// "3.0 GiB".
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// parseSize reads a size such as "1048576", "100k", "10M", "1.5GiB"
// (binary multiples; the "B"/"iB" suffix is optional).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := int64(1)
	if n := len(t); n > 0 {
		if i := strings.IndexByte("KMGTPE", t[n-1]); i >= 0 {
			mult = int64(1) << (10 * (i + 1))
			t = t[:n-1]
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || f < 0 || f*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("bad size %q: want bytes or a number with K, M, G, T (e.g. 100k, 1.5G)", s)
	}
	return int64(f * float64(mult)), nil
}

// groupDigits formats n with thousands separators: 60000 → "60,000".
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// plural picks the word for n things: "1 group", "2 groups".
func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// writeJSON writes v to out as one line of JSON.
func writeJSON(out io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return &exitError{Code: exitFailure, Err: err}
	}
	_, err = out.Write(append(b, '\n'))
	return err
}

// flushOut flushes a command's buffered stdout; a failed write (a full
// disk, a closed terminal) is exit status 1, never a silently short list.
func flushOut(out *bufio.Writer) error {
	if err := out.Flush(); err != nil {
		return &exitError{Code: exitFailure, Err: fmt.Errorf("write output: %w", err)}
	}
	return nil
}
