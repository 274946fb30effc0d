package config

import (
	"fmt"
	"strconv"
	"strings"
)

// Size is a byte count. In the file it is an integer or a string with a
// binary or decimal unit: 65536, "64KiB", "1MiB", "10MB".
type Size int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// ParseSize parses a size such as "64KiB" or "4096".
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%w: size %q: want a number of bytes such as 65536 or \"64KiB\"", ErrInvalid, s)
	}
	return Size(n * mult), nil
}

// UnmarshalTOML accepts an integer or a string with a unit.
func (z *Size) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		if v < 0 {
			return fmt.Errorf("%w: size %d is negative", ErrInvalid, v)
		}
		*z = Size(v)
		return nil
	case string:
		s, err := ParseSize(v)
		*z = s
		return err
	}
	return fmt.Errorf("%w: size %v: want an integer or a string such as \"64KiB\"", ErrInvalid, v)
}

// Set implements pflag.Value so sizes can be flags.
func (z *Size) Set(s string) error {
	v, err := ParseSize(s)
	if err == nil {
		*z = v
	}
	return err
}

// String formats the size in bytes.
func (z Size) String() string { return strconv.FormatInt(int64(z), 10) }

// Type implements pflag.Value.
func (z *Size) Type() string { return "size" }
