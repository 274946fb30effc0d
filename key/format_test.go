package key

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const hex256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// parseCases are keys git-annex's parser accepts, with the fields Parse must
// find and git-annex's canonical form (checked with `git annex examinekey`).
var parseCases = []struct {
	in        string
	canon     string // "" means the same as in
	backend   string
	name      string
	size      int64
	hasSize   bool
	mtime     int64
	hasMtime  bool
	chunkSize int64
	hasCS     bool
	chunkNum  int64
	hasCN     bool
}{
	{in: "SHA256E-s0--" + hex256, backend: "SHA256E", name: hex256, hasSize: true},
	{in: "SHA256E-s10--abc.txt", backend: "SHA256E", name: "abc.txt", size: 10, hasSize: true},
	{in: "SHA256E-s010--abc", canon: "SHA256E-s10--abc", backend: "SHA256E", name: "abc", size: 10, hasSize: true},
	{in: "SHA256E-s00--abc", canon: "SHA256E-s0--abc", backend: "SHA256E", name: "abc", hasSize: true},
	{in: "SHA256E--", backend: "SHA256E"},
	{in: "SHA256E--x", backend: "SHA256E", name: "x"},
	{in: "SHA256E--s10", backend: "SHA256E", name: "s10"},
	{in: "SHA256E-s1-m2-S3-C4--x--y", backend: "SHA256E", name: "x--y", size: 1, hasSize: true,
		mtime: 2, hasMtime: true, chunkSize: 3, hasCS: true, chunkNum: 4, hasCN: true},
	{in: "SHA256E-C4--x", backend: "SHA256E", name: "x", chunkNum: 4, hasCN: true},
	{in: "SHA256E-S4--x", backend: "SHA256E", name: "x", chunkSize: 4, hasCS: true},
	{in: "WORM-s1-m1700000000--foo-bar--baz", backend: "WORM", name: "foo-bar--baz", size: 1, hasSize: true,
		mtime: 1700000000, hasMtime: true},
	{in: "URL--http&c%%example.com/x", backend: "URL", name: "http&c%%example.com/x"},
	{in: "SHA256E-s9223372036854775807--x", backend: "SHA256E", name: "x", size: 9223372036854775807, hasSize: true},
	{in: "SHA256-s1--a." + strings.Repeat("0", 70), backend: "SHA256", name: "a." + strings.Repeat("0", 70), size: 1, hasSize: true},
	{in: "SHA256E-s1--a." + strings.Repeat("0", 63), backend: "SHA256E", name: "a." + strings.Repeat("0", 63), size: 1, hasSize: true},
	{in: "XFOO-s1--a b\x00\xff", backend: "XFOO", name: "a b\x00\xff", size: 1, hasSize: true},
	{in: "\xff\n--", backend: "\xff\n"},
}

func TestParse(t *testing.T) {
	for _, tt := range parseCases {
		k, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		size, hasSize := k.Size()
		mtime, hasMtime := k.Mtime()
		cs, hasCS := k.ChunkSize()
		cn, hasCN := k.ChunkNum()
		if k.BackendName() != tt.backend || k.Name() != tt.name ||
			size != tt.size || hasSize != tt.hasSize || mtime != tt.mtime || hasMtime != tt.hasMtime ||
			cs != tt.chunkSize || hasCS != tt.hasCS || cn != tt.chunkNum || hasCN != tt.hasCN {
			t.Errorf("Parse(%q) = %#v, want fields %+v", tt.in, k, tt)
		}
		want := tt.canon
		if want == "" {
			want = tt.in
		}
		if got := k.String(); got != want {
			t.Errorf("Parse(%q).String() = %q, want %q", tt.in, got, want)
		}
		if k2, err := Parse(k.String()); err != nil || k2 != k {
			t.Errorf("round trip of %q: %#v, %v", tt.in, k2, err)
		}
	}
}

// parseErrors are strings git-annex's parser refuses, with a word the error
// message must contain.
var parseErrors = []struct {
	in   string
	want string
}{
	{"", `no "--"`},
	{"SHA256E", `no "--"`},
	{"SHA256E-s1", `no "--"`},
	{"SHA256E-s1-", `no "--"`},
	{"-s1--x", "empty backend"},
	{"--x", "empty backend"},
	{"SHA256E-m1-s1--x", `"-s1" repeated or out of order`},
	{"SHA256E-s1-s1--x", `"-s1" repeated or out of order`},
	{"SHA256E-C1-S1--x", `"-S1" repeated or out of order`},
	{"SHA256E-s+1--x", `"-s+1" has no decimal digits`},
	{"SHA256E-s-1--x", `"-s" has no decimal digits`},
	{"SHA256E-s--x", `"-s" has no decimal digits`},
	{"SHA256E-x1--x", `unknown field "-x1"`},
	{"SHA256E-s1x--x", `unexpected "x"`},
	{"SHA256E-s1 --x", `unexpected " "`},
	{"SHA256E- s1--x", `unknown field "- s1"`},
	{"SHA256E-s1-m--x", `"-m" has no decimal digits`},
	{"SHA256E-s1--a." + strings.Repeat("0", 64), "extension longer than 64 bytes"},
	{"FOOE--." + strings.Repeat("x", 64), "extension longer than 64 bytes"},
	{"SHA256E-s9223372036854775808--x", "-s9223372036854775808 does not fit in 64 bits"},
	{"WORM-m99999999999999999999--x", "does not fit in 64 bits"},
}

func TestParseErrors(t *testing.T) {
	for _, tt := range parseErrors {
		k, err := Parse(tt.in)
		if err == nil {
			t.Errorf("Parse(%q) = %q, want an error", tt.in, k)
			continue
		}
		if !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q): %v does not wrap ErrSyntax", tt.in, err)
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q): error %q does not say %q", tt.in, err, tt.want)
		}
		if !k.IsZero() {
			t.Errorf("Parse(%q) returned %#v with its error", tt.in, k)
		}
	}
}

func TestParseErrorQuotesLongKeysShort(t *testing.T) {
	_, err := Parse(strings.Repeat("A", 10000))
	if err == nil || len(err.Error()) > 300 {
		t.Fatalf("error for a 10000-byte key: %v", err)
	}
}

func TestTextAndJSON(t *testing.T) {
	type rec struct {
		Key   Key `json:"key"`
		Unset Key `json:"unset"`
	}
	k, err := Parse("SHA256E-s3-m5-S7-C2--ba7816bf.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rec{Key: k})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"key":"SHA256E-s3-m5-S7-C2--ba7816bf.txt","unset":""}`; string(b) != want {
		t.Fatalf("json = %s, want %s", b, want)
	}
	var back rec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Key != k || !back.Unset.IsZero() {
		t.Fatalf("json round trip: %#v", back)
	}
	if err := json.Unmarshal([]byte(`{"key":"SHA256E-s3"}`), &back); !errors.Is(err, ErrSyntax) {
		t.Fatalf("bad key in JSON: %v, want ErrSyntax", err)
	}
}

func TestKeyIsComparableMapKey(t *testing.T) {
	a, _ := Parse("SHA256E-s3--ba7816bf.txt")
	b, _ := Parse("SHA256E-s03--ba7816bf.txt")
	c, _ := Parse("SHA256E-s3--ba7816bf.TXT")
	m := map[Key]int{a: 1}
	m[b]++
	m[c]++
	if len(m) != 2 || m[a] != 2 {
		t.Fatalf("map of keys = %v", m)
	}
}

// canonical rewrites s the way git-annex's serializer would if s parses:
// leading zeros of the numeric fields dropped. Field digits are the runs
// after "-s", "-m", "-S", "-C" before the first "--" (a backend cannot hold
// '-', so the first "--" ends the fields).
func canonical(s string) string {
	head, name, ok := strings.Cut(s, "--")
	if !ok {
		return s
	}
	parts := strings.Split(head, "-")
	for i := 1; i < len(parts); i++ {
		p := parts[i]
		if len(p) > 2 {
			digits := strings.TrimLeft(p[1:], "0")
			if digits == "" {
				digits = "0"
			}
			parts[i] = p[:1] + digits
		}
	}
	return strings.Join(parts, "-") + "--" + name
}

func FuzzParse(f *testing.F) {
	for _, tt := range parseCases {
		f.Add(tt.in)
	}
	for _, tt := range parseErrors {
		f.Add(tt.in)
	}
	for _, v := range katVectors {
		f.Add(v.want)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) || !k.IsZero() {
				t.Fatalf("Parse(%q) = %#v, %v", s, k, err)
			}
			return
		}
		out := k.String()
		k2, err := Parse(out)
		if err != nil || k2 != k {
			t.Fatalf("Parse(%q) = %#v; Parse(%q) = %#v, %v", s, k, out, k2, err)
		}
		if want := canonical(s); out != want {
			t.Fatalf("Parse(%q).String() = %q, want %q", s, out, want)
		}
		if k.IsZero() || !strings.HasPrefix(out, k.BackendName()) || !strings.HasSuffix(out, "--"+k.Name()) {
			t.Fatalf("Parse(%q) = %#v", s, k)
		}
		var u Key
		if err := u.UnmarshalText([]byte(s)); err != nil || u != k {
			t.Fatalf("UnmarshalText(%q) = %#v, %v", s, u, err)
		}
	})
}

func BenchmarkParse(b *testing.B) {
	s := "SHA256E-s1048576--" + hex256 + ".tar.gz"
	for b.Loop() {
		if _, err := Parse(s); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkString(b *testing.B) {
	k, err := Parse("SHA256E-s1048576--" + hex256 + ".tar.gz")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		_ = k.String()
	}
}

// AppendText appends what String returns, after what the buffer held.
func TestAppendText(t *testing.T) {
	for _, s := range []string{"SHA256E-s10--" + strings.Repeat("ab", 32) + ".tar.gz", "SHA256-s0--" + strings.Repeat("0", 64),
		"WORM-s5-m1700000000--name", "SHA256E-s1048576-S262144-C2--" + strings.Repeat("cd", 32) + ".bin", ""} {
		var k Key
		if s != "" {
			var err error
			if k, err = Parse(s); err != nil {
				t.Fatalf("Parse(%q): %v", s, err)
			}
		}
		b, err := k.AppendText([]byte("x:"))
		if err != nil || string(b) != "x:"+k.String() || k.String() != s {
			t.Errorf("AppendText of %q = %q, %v; String %q", s, b, err, k.String())
		}
	}
}
