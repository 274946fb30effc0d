package key

import "strings"

// ExtRule holds the limits of the E-backend extension rule: git-annex's
// annex.maxextensionlength setting and the number of extension components
// kept.
//
// A zero field means git-annex's default (4 and 2). A negative field means
// "no extension at all", which is what git-annex does when its setting is 0
// or negative. git-annex 10.20230126 always keeps at most 2 components: it
// does not read annex.maxextensions (later versions do, with the same
// meaning as MaxCount here).
type ExtRule struct {
	MaxLength int // longest extension component kept, in bytes
	MaxCount  int // most components kept
}

// DefaultExtRule is git-annex 10's default.
var DefaultExtRule = ExtRule{MaxLength: 4, MaxCount: 2}

func (r ExtRule) withDefaults() ExtRule {
	if r.MaxLength == 0 {
		r.MaxLength = DefaultExtRule.MaxLength
	}
	if r.MaxCount == 0 {
		r.MaxCount = DefaultExtRule.MaxCount
	}
	return r
}

// Extension returns the extension an E backend puts in the key of a file
// named filename (a path or a base name; only the base name counts), with
// its leading dot, or "" when there is none. The name is treated as bytes:
// it need not be UTF-8.
//
// The rule, as git-annex's selectExtension applies it: drop the leading dots
// of the base name; take everything from the first remaining dot; split it
// on dots; walking from the last component backwards, stop at the first
// component longer than r.MaxLength bytes, skip components holding an ASCII
// byte other than a letter or digit (bytes ≥ 0x80 are allowed), and keep
// at most r.MaxCount components, counting empty ones; finally drop the empty
// components. Case is kept. So "two..dots.txt" gives ".dots.txt" but
// "x.a..b" gives ".b" (the empty component between the dots uses up one of
// the two places).
func Extension(filename string, r ExtRule) string {
	r = r.withDefaults()
	if r.MaxLength < 0 || r.MaxCount < 0 {
		return ""
	}
	base := filename[strings.LastIndexByte(filename, '/')+1:]
	base = strings.TrimLeft(base, ".")
	dot := strings.IndexByte(base, '.')
	if dot < 0 {
		return ""
	}
	exts := base[dot:] // ".tar.gz": the first component is always empty
	var kept []string
	taken := 0
	for end := len(exts); end > 0 && taken < r.MaxCount; {
		start := strings.LastIndexByte(exts[:end], '.') + 1
		c := exts[start:end]
		end = start - 1
		if len(c) > r.MaxLength {
			break
		}
		if !extBytesOK(c) {
			continue
		}
		taken++
		if c != "" {
			kept = append(kept, c)
		}
	}
	var sb strings.Builder
	for i := len(kept) - 1; i >= 0; i-- {
		sb.WriteByte('.')
		sb.WriteString(kept[i])
	}
	return sb.String()
}

// extBytesOK reports whether every byte of c may appear in an extension:
// ASCII letters and digits, and any byte ≥ 0x80.
func extBytesOK(c string) bool {
	for i := 0; i < len(c); i++ {
		b := c[i]
		if b < 0x80 && !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9') {
			return false
		}
	}
	return true
}
