package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/testutil"
	"github.com/annexd/annexd/key"
)

// annexctlBuild is the annexctl binary the package's tests share.
var annexctlBuild = testutil.Build{Pkg: "github.com/annexd/annexd/cmd/annexctl"}

func TestMain(m *testing.M) {
	code := m.Run()
	annexctlBuild.Remove()
	os.Exit(code)
}

// buildAnnexctl returns the shared annexctl binary, built on first use.
// Its folder is open to all: TestCalckeyBadInputs runs it as nobody.
func buildAnnexctl(t *testing.T) string { return annexctlBuild.Binary(t) }

func needGitAnnex(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("git", "annex", "version").CombinedOutput(); err != nil {
		t.Fatalf("this test compares with the real git-annex, which is missing: apt-get install git-annex (%v: %s)", err, out)
	}
}

// calckeyCorpus writes files with awkward names and sizes into dir (a git
// repository) and returns their names relative to dir.
func calckeyCorpus(t *testing.T, dir string) []string {
	t.Helper()
	names := []string{
		"plain", "a.txt", "photo.JPG", "a.backup.tar.gz", "x.jpeg", "x.abcde", "x.tar.gz~",
		"x.ab.cdefg", "two..dots.txt", ".hidden", "..leading.dots.md", "trailing.", "trailing..",
		"with space.mp3", "ünïcödé.fläc", "日本語.テキスト", "emoji.🎉", "bad\xffutf8.b\xfe",
		"dash-ext.a-b", "under_score.a_b", "many.a.b.c.d", "UPPER.TAR.GZ", "digits.7z", "x.mp4.part",
		"-starts-with-dash.txt", "ends.with.dot.", "tab\tname.txt", "new\nline.txt", "quote'n\".txt",
		"ext.toolong12", "x.a", "x..", "....", "a.b.c.d.e.f",
	}
	sizes := []int{0, 1, 3, 55, 56, 63, 64, 65, 111, 112, 127, 128, 129, 4095, 4096, 4097,
		65536, 256<<10 - 1, 256 << 10, 1<<20 + 1, 3 << 20}
	var files []string
	for i, n := range names {
		files = append(files, n)
		writeBytes(t, filepath.Join(dir, n), i, sizes[i%len(sizes)])
	}
	for i, n := range sizes {
		name := fmt.Sprintf("size-%d.bin", n)
		files = append(files, name)
		writeBytes(t, filepath.Join(dir, name), 1000+i, n)
	}
	// Enough large files at once for the pool's multi-buffer lanes.
	for i := range 12 {
		name := fmt.Sprintf("large-%02d.mkv", i)
		files = append(files, name)
		writeBytes(t, filepath.Join(dir, name), 2000+i, 200<<10+i*150<<10+i)
	}
	return files
}

func writeBytes(t *testing.T, path string, seed, n int) {
	t.Helper()
	b := make([]byte, n)
	x := uint32(seed*2654435761 + 1)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func runIn(dir string, stdin []byte, name string, args ...string) (stdout, stderr string, code int) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	// No system or user git configuration: a machine's annex.backend or
	// extension settings must not change git-annex's answers.
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	cmd.Stdin = bytes.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
		e.WriteString(err.Error())
	}
	return o.String(), e.String(), code
}

// The built annexctl prints exactly what git annex calckey prints, for every
// backend, awkward names and sizes, as arguments and in batch mode.
func TestCalckeyMatchesGitAnnex(t *testing.T) {
	needGitAnnex(t)
	tmp := t.TempDir()
	bin := buildAnnexctl(t)
	repo := filepath.Join(tmp, "repo")
	if err := os.Mkdir(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runIn(tmp, nil, "git", "init", "-q", repo); code != 0 {
		t.Fatalf("git init: exit %d %s", code, errOut)
	}
	files := calckeyCorpus(t, repo)
	var nulInput []byte
	for _, f := range files {
		nulInput = append(append(nulInput, f...), 0)
	}
	for _, b := range key.Backends() {
		want, stderr, code := runIn(repo, nil, "git", append([]string{"annex", "calckey", "--backend", b.String(), "--"}, files...)...)
		if code != 0 || strings.Count(want, "\n") != len(files) {
			t.Fatalf("git annex calckey --backend %s: exit %d, %d lines for %d files: %s", b, code, strings.Count(want, "\n"), len(files), stderr)
		}
		got, stderr, code := runIn(repo, nil, bin, append([]string{"calckey", "--backend", b.String(), "--"}, files...)...)
		if code != 0 || stderr != "" {
			t.Fatalf("annexctl calckey --backend %s: exit %d: %s", b, code, stderr)
		}
		compareLines(t, "args "+b.String(), files, got, want)

		got, stderr, code = runIn(repo, nulInput, bin, "calckey", "--batch", "-z", "--backend", b.String())
		if code != 0 || stderr != "" {
			t.Fatalf("annexctl calckey --batch -z --backend %s: exit %d: %s", b, code, stderr)
		}
		compareLines(t, "batch -z "+b.String(), files, got, want)
	}
	// Batch mode without -z, names without newlines, checked against
	// git-annex's own batch mode.
	var lineInput []byte
	for _, f := range files {
		if !strings.Contains(f, "\n") {
			lineInput = append(append(lineInput, f...), '\n')
		}
	}
	want, _, _ := runIn(repo, lineInput, "git", "annex", "calckey", "--batch")
	got, stderr, code := runIn(repo, lineInput, bin, "calckey", "--batch")
	if code != 0 || got != want {
		t.Fatalf("--batch: exit %d, stderr %q\ngot  %q\nwant %q", code, stderr, got, want)
	}
}

func compareLines(t *testing.T, what string, files []string, got, want string) {
	t.Helper()
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	if len(g) != len(w) {
		t.Fatalf("%s: %d lines, git-annex printed %d", what, len(g), len(w))
	}
	for i := range w {
		if g[i] != w[i] {
			t.Errorf("%s: %q: got %q, git-annex %q", what, files[i], g[i], w[i])
		}
	}
}

// Bad inputs are named on stderr with exit status 1, and every good file
// still gets its key, in order.
func TestCalckeyBadInputs(t *testing.T) {
	tmp := t.TempDir()
	// nobody must reach the files (the unreadable case), and the binary
	// (buildAnnexctl's directory is open to all).
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := buildAnnexctl(t)
	dir := filepath.Join(tmp, "in")
	os.Mkdir(dir, 0o755)
	good := filepath.Join(dir, "good.txt")
	os.WriteFile(good, []byte("hello"), 0o644)
	const goodKey = "SHA256E-s5--2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824.txt"
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	link := filepath.Join(dir, "link.txt")
	os.Symlink(good, link)
	sub := filepath.Join(dir, "sub dir")
	os.Mkdir(sub, 0o755)
	missing := filepath.Join(dir, "missing")
	secret := filepath.Join(dir, "secret.txt")
	os.WriteFile(secret, []byte("hello"), 0)

	args := []string{"calckey", good, fifo, sock, good, link, "/dev/null", sub, missing, secret, good}
	cmd := exec.Command(bin, args...)
	if os.Getuid() == 0 {
		// Root reads any file: run as nobody so that mode 000 bites.
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1; stderr:\n%s", err, e.String())
	}
	if want := strings.Repeat(goodKey+"\n", 3); o.String() != want {
		t.Errorf("stdout %q, want the good file's key three times", o.String())
	}
	msgs := strings.Split(strings.TrimSuffix(e.String(), "\n"), "\n")
	wantMsgs := []struct{ path, says string }{
		{fifo, "FIFO"}, {sock, "socket"}, {link, "symlink"}, {"/dev/null", "device"},
		{sub, "directory"}, {missing, "no such file"}, {secret, "permission denied"},
	}
	if len(msgs) != len(wantMsgs) {
		t.Fatalf("stderr has %d lines, want %d:\n%s", len(msgs), len(wantMsgs), e.String())
	}
	for i, w := range wantMsgs {
		if !strings.Contains(msgs[i], w.path) || !strings.Contains(msgs[i], w.says) {
			t.Errorf("message %d %q: want it to name %s and say %q", i, msgs[i], w.path, w.says)
		}
	}

	// Batch mode answers every line, empty for the bad ones.
	in := strings.Join([]string{good, fifo, sub, missing, good}, "\n") + "\n"
	out, stderr, code := runIn(tmp, []byte(in), bin, "calckey", "--batch")
	if code != 1 || out != goodKey+"\n\n\n\n"+goodKey+"\n" || strings.Count(stderr, "\n") != 3 {
		t.Errorf("batch: exit %d, stdout %q, stderr %q", code, out, stderr)
	}

	for _, bad := range [][]string{{"calckey"}, {"calckey", "--backend", "WORM", good}, {"calckey", "--batch", good}, {"calckey", "-z", good}} {
		if _, stderr, code := runIn(tmp, nil, bin, bad...); code != 2 || stderr == "" {
			t.Errorf("%q: exit %d, stderr %q; want usage error 2 with a message", bad, code, stderr)
		}
	}
}

// In batch mode every answer comes as soon as it is known, before stdin
// ends, so a program can drive calckey one line at a time.
func TestCalckeyBatchAnswersEachLine(t *testing.T) {
	tmp := t.TempDir()
	bin := buildAnnexctl(t)
	a := filepath.Join(tmp, "a.txt")
	os.WriteFile(a, []byte("hello"), 0o644)
	cmd := exec.Command(bin, "calckey", "--batch")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for _, in := range []string{a, filepath.Join(tmp, "missing"), a} {
		fmt.Fprintln(stdin, in)
		select {
		case got := <-lines:
			want := ""
			if in == a {
				want = "SHA256E-s5--2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824.txt"
			}
			if got != want {
				t.Fatalf("answer for %s: %q, want %q", in, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no answer for %s while stdin stays open", in)
		}
	}
}
