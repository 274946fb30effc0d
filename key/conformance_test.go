package key

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/testutil"
)

// This file checks the package against the real git-annex: every backend's
// key for a few hundred awkward files (git annex calckey), and the key
// parser on a few hundred strings (git annex examinekey). git-annex is a
// required test dependency: without it these tests fail.

// annex is a throwaway git-annex repository with a hermetic environment.
type annex struct {
	dir     string
	env     []string
	version string
}

func newAnnex(t *testing.T) *annex {
	t.Helper()
	out, err := exec.Command("git", "annex", "version", "--raw").Output()
	if err != nil {
		t.Fatalf("git-annex is needed by this test and is not installed (`git annex version`: %v); "+
			"install it with `apt-get install git-annex`", err)
	}
	home := t.TempDir()
	a := &annex{
		dir:     filepath.Join(home, "repo"),
		version: strings.TrimSpace(string(out)),
		env: append(os.Environ(),
			"HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
			"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.invalid",
			"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.invalid"),
	}
	if err := os.Mkdir(a.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	a.run(t, nil, "git", "init", "-q")
	a.run(t, nil, "git", "annex", "init", "-q", "conformance")
	return a
}

// run runs a command in the repository and returns its standard output; a
// non-zero exit fails the test.
func (a *annex) run(t *testing.T, stdin []byte, name string, args ...string) []byte {
	t.Helper()
	out, stderr, err := a.try(t, stdin, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr)
	}
	return out
}

// try runs a command in the repository, returning its output and error.
func (a *annex) try(t *testing.T, stdin []byte, name string, args ...string) (stdout, stderr []byte, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = a.dir
	cmd.Env = a.env
	cmd.Stdin = bytes.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.Bytes(), e.Bytes(), err
}

// calckey runs `git [gitArgs] annex calckey --batch -z --backend b` on
// paths (relative to the repository) and returns one key per path.
func (a *annex) calckey(t *testing.T, b Backend, gitArgs []string, paths []string) []string {
	t.Helper()
	// NUL separates, not terminates: git-annex answers a trailing NUL
	// with one more, empty, line.
	in := []byte(strings.Join(paths, "\x00"))
	args := append(append([]string{}, gitArgs...), "annex", "calckey", "--batch", "-z", "--backend", b.String())
	out := a.run(t, in, "git", args...)
	// Keys never hold a newline (it is not allowed in an extension), so
	// the output is one key per line even with -z.
	keys := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(keys) != len(paths) {
		t.Fatalf("git %s: %d keys for %d files", strings.Join(args, " "), len(keys), len(paths))
	}
	return keys
}

// conformanceNames are base names of files for the calckey comparison: the
// Extension table and more.
func conformanceNames() []string {
	names := []string{
		"spaces in name.txt", "ext with space.a b.c", "tilde~", "x.txt~", "~", "~.txt",
		"émoji😀.png", "x.日本", "x.日本語", "Ünïcödé.TXT", "x.ＪＰＧ",
		"bad\xff.\xff", "\xff\xfe", "x.\xc3", "\xc3.\xa9",
		"newline\nname.txt", "x.a\nb", "tab\t.c", "x.%20", "x.a=b", "-dash.txt", "--.md",
		"x.TXT.Gz", "x.0", "x.00000", "Makefile", "x.tgz", "IMG_0001.JPEG", "IMG_0001.jpeg.xz",
		"archive.tar.zst", "archive.tar.bz2", "data.json.gz", "a.b.c.d.e.f.g",
		"trailing.", "trailing..", "...", ".....x", ". .x", " .txt", "x. ",
		strings.Repeat("long", 60) + ".tar.gz",
		strings.Repeat("y", 250) + ".ab",
		"x." + strings.Repeat("é", 2) + "." + strings.Repeat("\xff", 4),
	}
	for _, c := range extensionCases {
		if c.name != "" && c.name != "." && c.name != ".." && !strings.Contains(c.name, "/") {
			names = append(names, c.name)
		}
	}
	return names
}

// conformanceSizes are file sizes around the hash block boundaries (64 bytes
// for SHA-1, SHA-256 and MD5, 128 for SHA-384, SHA-512 and BLAKE2b), where
// the padding changes, and around read-buffer sizes.
var conformanceSizes = []int{
	0, 1, 2, 55, 56, 57, 63, 64, 65, 111, 112, 113, 119, 120, 127, 128, 129,
	255, 256, 257, 1023, 1024, 1025, 4095, 4096, 4097, 65535, 65536, 65537,
	131072, 1<<20 + 1,
}

type confFile struct {
	path string // relative to the repository
	data []byte
}

// makeConformanceFiles writes each name with several sizes, each file in a
// directory of its own whose name has dots (only the base name counts).
func makeConformanceFiles(t *testing.T, repo string) []confFile {
	t.Helper()
	maxSize := conformanceSizes[len(conformanceSizes)-1]
	src := make([]byte, maxSize+64)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	var files []confFile
	for i, name := range conformanceNames() {
		for j := 0; j < 4; j++ {
			n := len(files)
			size := conformanceSizes[(i*5+j*7)%len(conformanceSizes)]
			if n < len(conformanceSizes) {
				size = conformanceSizes[n] // every size at least once
			}
			f := confFile{
				path: fmt.Sprintf("f/d%03d.tar.gz/%s", n, name),
				data: src[n%64 : n%64+size],
			}
			full := filepath.Join(repo, f.path)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, f.data, 0o644); err != nil {
				t.Fatalf("writing %q: %v", full, err)
			}
			files = append(files, f)
		}
	}
	return files
}

func TestConformanceCalckey(t *testing.T) {
	a := newAnnex(t)
	files := makeConformanceFiles(t, a.dir)
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = f.path
	}
	t.Logf("git-annex %s, %d files", a.version, len(files))

	digests := map[Backend][][]byte{}
	for _, b := range Backends() {
		if b.HasExtension() {
			continue // same digest as the base backend
		}
		for _, f := range files {
			h := newHash(t, b)
			h.Write(f.data)
			digests[b] = append(digests[b], h.Sum(nil))
		}
	}
	compare := func(t *testing.T, b Backend, r ExtRule, gitArgs []string) {
		t.Helper()
		got := a.calckey(t, b, gitArgs, paths)
		bad := 0
		for i, f := range files {
			k, err := FromDigest(b, digests[b.Base()][i], int64(len(f.data)), f.path, r)
			if err != nil {
				t.Fatalf("%v %q: %v", b, f.path, err)
			}
			if k.String() != got[i] && bad < 10 {
				bad++
				t.Errorf("git %s annex calckey --backend %v %q (%d bytes):\n ours      %q\n git-annex %q", strings.Join(gitArgs, " "), b, f.path, len(f.data), k.String(), got[i])
			}
		}
	}
	for _, b := range Backends() {
		t.Run(b.String(), func(t *testing.T) { compare(t, b, DefaultExtRule, nil) })
	}

	// The annex.maxextensionlength setting; 0 and below mean no extension.
	for _, n := range []int{1, 2, 6, 10, 0, -1} {
		r := ExtRule{MaxLength: n}
		if n <= 0 {
			r.MaxLength = -1
		}
		args := []string{"-c", fmt.Sprintf("annex.maxextensionlength=%d", n)}
		t.Run(fmt.Sprintf("maxextensionlength=%d", n), func(t *testing.T) { compare(t, SHA256E, r, args) })
	}
	// annex.maxextensions: 10.20230126 does not read it (always 2); later
	// versions keep that many components, as MaxCount does.
	r := ExtRule{MaxCount: 3}
	if a.version == "10.20230126" {
		r = DefaultExtRule
	}
	t.Run("maxextensions=3", func(t *testing.T) {
		compare(t, MD5E, r, []string{"-c", "annex.maxextensions=3"})
	})
}

// parseConformanceInputs are strings for the parser comparison: the test
// tables plus random strings built from the pieces keys are made of.
func parseConformanceInputs() []string {
	var in []string
	for _, c := range parseCases {
		in = append(in, c.in)
	}
	for _, c := range parseErrors {
		in = append(in, c.in)
	}
	for _, v := range katVectors {
		in = append(in, v.want)
	}
	backends := []string{"SHA256E", "SHA256", "WORM", "URL", "XFOOE", "E", "x", "S\xffE", "SHA256E\t", "s1"}
	fields := []string{"-s1", "-s0", "-s007", "-m5", "-m0", "-S1048576", "-C3", "-C0", "-s", "-m",
		"-x1", "-", "-s+1", "-s-1", "1", "\t", "-s18446744073709551616", "-S01"}
	names := []string{"", "abc", ".txt", "a.b", "--", "-s1", "x--y", "é.日本", "\xff", "d.e.f",
		"." + strings.Repeat("e", 63), "." + strings.Repeat("e", 64), "z." + strings.Repeat("e", 63)}
	rng := rand.New(rand.NewPCG(3, 4))
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	// git-annex stops at the first key it refuses, and each refusal costs
	// a start of git-annex (70 ms of CPU): 100 made strings here, 300 in
	// .ci/run.
	for range testutil.Runs(100, 300) {
		var sb strings.Builder
		sb.WriteString(pick(backends))
		for range rng.IntN(4) {
			sb.WriteString(pick(fields))
		}
		if rng.IntN(8) != 0 {
			sb.WriteString("--")
		}
		sb.WriteString(pick(names))
		in = append(in, sb.String())
	}
	return in
}

// examinekey asks git-annex to parse each key and returns its serialization
// of the ones it accepts. In batch mode git-annex stops at the first key it
// refuses, so the batch is restarted after each refused key.
func (a *annex) examinekey(t *testing.T, keys []string) (accepted map[int]string) {
	t.Helper()
	accepted = map[int]string{}
	for pos := 0; pos < len(keys); {
		in := []byte(strings.Join(keys[pos:], "\x00"))
		out, stderr, err := a.try(t, in, "git", "annex", "examinekey", "--batch", "-z", "--format", `${key}\000`)
		got := strings.Split(string(out), "\x00")
		got = got[:len(got)-1]
		for i, s := range got {
			accepted[pos+i] = s
		}
		pos += len(got)
		if err == nil {
			if pos != len(keys) {
				t.Fatalf("examinekey printed %d keys for %d", pos, len(keys))
			}
			break
		}
		if !bytes.Contains(stderr, []byte("bad key")) {
			t.Fatalf("examinekey on %q: %v\n%s", keys[pos], err, stderr)
		}
		pos++ // keys[pos] is the one git-annex refused
	}
	return accepted
}

func TestConformanceParse(t *testing.T) {
	a := newAnnex(t)
	var keys []string
	seen := map[string]bool{}
	for _, s := range parseConformanceInputs() {
		// A batch can carry neither NUL nor an empty line, and examinekey
		// reads "KEY FILE" (it cuts its input at the first space) before
		// the key parser sees it: strings with a space cannot be asked.
		if s != "" && !strings.ContainsAny(s, "\x00 ") && !seen[s] {
			seen[s] = true
			keys = append(keys, s)
		}
	}
	accepted := a.examinekey(t, keys)
	t.Logf("git-annex %s accepts %d of %d strings", a.version, len(accepted), len(keys))
	var nAccept, nRefuse int
	for i, s := range keys {
		want, ok := accepted[i]
		k, err := Parse(s)
		switch {
		case err != nil && strings.Contains(err.Error(), "does not fit in 64 bits"):
			// A documented refusal: git-annex keeps such numbers.
			if !ok {
				t.Errorf("Parse(%q): %v; git-annex refuses it too, for another reason", s, err)
			}
		case ok && err != nil:
			t.Errorf("Parse(%q): %v; git-annex accepts it as %q", s, err, want)
		case !ok && err == nil:
			t.Errorf("Parse(%q) = %q; git-annex refuses it", s, k.String())
		case ok && k.String() != want:
			t.Errorf("Parse(%q).String() = %q; git-annex writes %q", s, k.String(), want)
		case ok:
			nAccept++
		default:
			nRefuse++
		}
	}
	if nAccept < 50 || nRefuse < 50 {
		t.Errorf("only %d accepted and %d refused strings agree: the inputs do not cover both sides", nAccept, nRefuse)
	}
}
