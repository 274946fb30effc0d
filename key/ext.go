package key

import "strings"

// ExtRule holds git-annex's annex.maxextensionlength and annex.maxextensions
// settings. The zero value means git-annex's defaults (4 and 2).
type ExtRule struct {
	MaxLength int // longest extension component in bytes
	MaxCount  int // most components kept
}

// DefaultExtRule is git-annex 10's default.
var DefaultExtRule = ExtRule{MaxLength: 4, MaxCount: 2}

func (r ExtRule) withDefaults() ExtRule {
	if r.MaxLength <= 0 {
		r.MaxLength = DefaultExtRule.MaxLength
	}
	if r.MaxCount <= 0 {
		r.MaxCount = DefaultExtRule.MaxCount
	}
	return r
}

// Extension returns the extension an E backend puts in the key of a file
// named filename (a path or base name), with its leading dot, or "".
func Extension(filename string, r ExtRule) string {
	r = r.withDefaults()
	base := filename[strings.LastIndexByte(filename, '/')+1:]
	base = strings.TrimLeft(base, ".")
	comps := strings.Split(base, ".")
	if len(comps) < 2 {
		return ""
	}
	comps = comps[1:]
	var kept []string
	for i := len(comps) - 1; i >= 0 && len(kept) < r.MaxCount; i-- {
		c := comps[i]
		if len(c) > r.MaxLength {
			break
		}
		if c == "" || !extBytesOK(c) {
			continue
		}
		kept = append(kept, c)
	}
	var sb strings.Builder
	for i := len(kept) - 1; i >= 0; i-- {
		sb.WriteByte('.')
		sb.WriteString(kept[i])
	}
	return sb.String()
}

func extBytesOK(c string) bool {
	for i := 0; i < len(c); i++ {
		b := c[i]
		if b < 0x80 && !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9') {
			return false
		}
	}
	return true
}
