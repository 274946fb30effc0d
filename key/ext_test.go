package key

import (
	"strings"
	"testing"
)

// The expectations below were checked one by one with `git annex calckey`
// (git-annex 10.20230126); the conformance test checks them all again
// against the real program.
var extensionCases = []struct {
	name string
	want string
}{
	// The examples of the design notes.
	{"a.backup.tar.gz", ".tar.gz"},
	{"x.jpeg", ".jpeg"},
	{"x.abcde", ""},
	{"x.tar.gz~", ".tar"},
	{"x.ab.cdefg", ""},
	{"two..dots.txt", ".dots.txt"},
	// Leading dots are dropped before looking for extensions.
	{".foo", ""},
	{"..foo", ""},
	{".foo.txt", ".txt"},
	{"...a.b.c", ".b.c"},
	{".", ""},
	{"..", ""},
	{"", ""},
	// Empty components count towards the two kept, then vanish.
	{"a..txt", ".txt"},
	{"x.a..b", ".b"},
	{"x.", ""},
	{"x..", ""},
	{"x.txt.", ".txt"},
	{"x.a.", ".a"},
	// Invalid components are skipped; too long ones stop the walk.
	{"x.a b.c", ".c"},
	{"x.a+b", ""},
	{"x.a-b.c", ".c"},
	{"x.ok.a_b", ".ok"},
	{"x.gz.partial", ""},
	{"x.tar.gz.part", ".gz.part"},
	{"x.abcde.gz", ".gz"},
	{"x.ab.abcde.gz", ".gz"},
	{"x.~", ""},
	{"x.a\\b", ""},
	{"x.t\x7fx", ""},
	{"x.a\x01", ""},
	{"x.a\tb.c", ".c"},
	{"x.a\nb.c", ".c"},
	// At most two components; case kept; digits fine.
	{"x.a.b.c.d", ".c.d"},
	{"x.JPG", ".JPG"},
	{"Mixed.TaR.Gz", ".TaR.Gz"},
	{"x.1", ".1"},
	{"x.1234", ".1234"},
	{"x.12345", ""},
	{"noext", ""},
	// Only the base name counts.
	{"dir.tar.gz/file", ""},
	{"dir.tar/file.gz", ".gz"},
	{"/abs/.hidden.d/x.md", ".md"},
	{"dir/", ""},
	// Bytes ≥ 0x80 are allowed and counted as bytes.
	{"x.é.txt", ".é.txt"},
	{"x.éé", ".éé"},
	{"x.ééé", ""},
	{"x.😀", ".😀"},
	{"x.😀x", ""},
	{"x.\xff", ".\xff"},
	{"x.\xe9t\xe9", ".\xe9t\xe9"},
	{"x.a\xffb.txt", ".a\xffb.txt"},
	{"x.\xff\xfe\xfd\xfc", ".\xff\xfe\xfd\xfc"},
	{"x.\xff\xfe\xfd\xfc\xfb", ""},
	{"x.\xc3\xa9\xff", ".\xc3\xa9\xff"},
	{"x.\xe2\x82", ".\xe2\x82"},
	{"x.\xed\xa0\x80", ".\xed\xa0\x80"},
}

func TestExtension(t *testing.T) {
	for _, tt := range extensionCases {
		if got := Extension(tt.name, DefaultExtRule); got != tt.want {
			t.Errorf("Extension(%q) = %q, want %q", tt.name, got, tt.want)
		}
		if got := Extension(tt.name, ExtRule{}); got != tt.want {
			t.Errorf("Extension(%q, zero rule) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// Checked with `git -c annex.maxextensionlength=N annex calckey`. git-annex
// 10.20230126 ignores annex.maxextensions; MaxCount follows the meaning later
// versions give it.
func TestExtensionRule(t *testing.T) {
	tests := []struct {
		name string
		rule ExtRule
		want string
	}{
		{"x.abcde", ExtRule{MaxLength: 6}, ".abcde"},
		{"x.ééé", ExtRule{MaxLength: 6}, ".ééé"},
		{"a.backup.tar.gz", ExtRule{MaxLength: 6}, ".tar.gz"},
		{"a.backup.tar.gz", ExtRule{MaxLength: 6, MaxCount: 3}, ".backup.tar.gz"},
		{"a.backup.tar.gz", ExtRule{MaxLength: 2}, ".gz"},
		{"a.backup.tar.gz", ExtRule{MaxLength: 1}, ""},
		{"x.a.b.c.d", ExtRule{MaxCount: 1}, ".d"},
		{"x.a.b.c.d", ExtRule{MaxCount: 3}, ".b.c.d"},
		{"x.a.b.c.d", ExtRule{MaxCount: 9}, ".a.b.c.d"},
		{"x.a..b", ExtRule{MaxCount: 3}, ".a.b"},
		{"a.backup.tar.gz", ExtRule{MaxLength: -1}, ""},
		{"a.backup.tar.gz", ExtRule{MaxCount: -1}, ""},
		{"x.a.b.c.d", ExtRule{MaxLength: -5, MaxCount: 3}, ""},
	}
	for _, tt := range tests {
		if got := Extension(tt.name, tt.rule); got != tt.want {
			t.Errorf("Extension(%q, %+v) = %q, want %q", tt.name, tt.rule, got, tt.want)
		}
	}
}

func BenchmarkExtension(b *testing.B) {
	for b.Loop() {
		Extension("/home/user/photos/2024/IMG_1234.backup.tar.gz", DefaultExtRule)
	}
}

// FuzzExtension checks what any extension must be: empty, or at most
// MaxCount dot-led components, each non-empty, no longer than MaxLength and
// made of allowed bytes, together a suffix of the base name.
func FuzzExtension(f *testing.F) {
	for _, c := range extensionCases {
		f.Add(c.name, 0, 0)
	}
	f.Add("a.backup.tar.gz", 6, 3)
	f.Add("x.a.b.c.d", -1, 9)
	f.Fuzz(func(t *testing.T, name string, maxLen, maxCount int) {
		r := ExtRule{MaxLength: maxLen % 16, MaxCount: maxCount % 8}
		ext := Extension(name, r)
		if ext == "" {
			return
		}
		d := r.withDefaults()
		comps := strings.Split(ext, ".")
		if comps[0] != "" || len(comps)-1 > d.MaxCount {
			t.Fatalf("Extension(%q, %+v) = %q: too many components", name, r, ext)
		}
		for _, c := range comps[1:] {
			if c == "" || len(c) > d.MaxLength || !extBytesOK(c) {
				t.Fatalf("Extension(%q, %+v) = %q: bad component %q", name, r, ext, c)
			}
		}
		// The components come, in order, from the base name's components
		// after the first; those after the last one taken were skipped:
		// empty or holding a disallowed byte, and not too long.
		base := strings.TrimLeft(name[strings.LastIndexByte(name, '/')+1:], ".")
		from := strings.Split(base, ".")[1:]
		j := len(from)
		for i := len(comps) - 1; i >= 1; i-- {
			j--
			for j >= 0 && from[j] != comps[i] {
				j--
			}
			if j < 0 {
				t.Fatalf("Extension(%q, %+v) = %q: %q is not a component of the name", name, r, ext, comps[i])
			}
			if i == len(comps)-1 {
				for _, c := range from[j+1:] {
					if (c != "" && extBytesOK(c)) || len(c) > d.MaxLength {
						t.Fatalf("Extension(%q, %+v) = %q: component %q after it was not skipped", name, r, ext, c)
					}
				}
			}
		}
	})
}
