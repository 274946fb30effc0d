package hasher

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/key"
)

// Known answers, computed independently (Python hashlib), for "", "abc" and
// pattern(1<<20+1), which spans several read buffers and ends mid-block.
var knownAnswers = map[key.Backend][3]string{
	key.SHA256: {
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
		"e42cda7f3d5f4472e6a826c1ae97c1d3933ba23ef486e8df5814889b7af6f7c4",
	},
	key.SHA512: {
		"cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e",
		"ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
		"e762beb97a53a3aa04353623e5933a2b771d6174324354c61285649dbc1c9f7523827b526cafa9f15aac157c06e2237b3ca8c6e573a3588d018bb72b1decff59",
	},
	key.SHA384: {
		"38b060a751ac96384cd9327eb1b1e36a21fdb71114be07434c0cc7bf63f6e1da274edebfe76f65fbd51ad2f14898b95b",
		"cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed8086072ba1e7cc2358baeca134c825a7",
		"c139e7b9fde9a2710a9de6892893cb8d9d98089cda5f0b7eccf2535452e42d4358d37b981e0b934af888ac21d5117799",
	},
	key.BLAKE2B256: {
		"0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8",
		"bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319",
		"2688e9220677d6586bc3cbd3fe801439fa2b72cf8631d70500f4a8105f4f3949",
	},
	key.BLAKE2B512: {
		"786a02f742015903c6c6fd852552d272912f4740e15847618a86e217f71f5419d25e1031afee585313896444934eb04b903a685b1448b755d56f701afe9be2ce",
		"ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d17d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923",
		"9878403fc144262373de4290afe00bd7f1c4774a351098c2edb9b8021ab2d1a85c9c648d8531dbb43c1b95180081652bbe6922a9b51e6c3cd7bb9fbc0d7a5d37",
	},
	key.SHA1: {
		"da39a3ee5e6b4b0d3255bfef95601890afd80709",
		"a9993e364706816aba3e25717850c26c9cd0d89d",
		"653ddeeaf4e966681017c2edd430f5752a171c57",
	},
	key.MD5: {
		"d41d8cd98f00b204e9800998ecf8427e",
		"900150983cd24fb0d6963f7d28e17f72",
		"cd3d8833b67a2fda2b485107cae3c025",
	},
}

func knownAnswerFiles(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i, data := range [][]byte{nil, []byte("abc"), pattern(1<<20 + 1)} {
		p := filepath.Join(dir, []string{"empty", "abc.txt", "pattern.bin"}[i])
		writeFile(t, p, data)
		paths = append(paths, p)
	}
	return paths
}

// pattern returns n deterministic bytes.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((i*7 + 3) % 251)
	}
	return b
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestKnownAnswersEveryBackend(t *testing.T) {
	paths := knownAnswerFiles(t)
	for _, b := range key.Backends() {
		want, ok := knownAnswers[b.Base()]
		if !ok {
			t.Fatalf("no known answers for %s", b)
		}
		for i, p := range paths {
			res, err := HashFile(context.Background(), p, b)
			if err != nil {
				t.Fatalf("%s %s: %v", b, p, err)
			}
			if got := hex.EncodeToString(res.Digest); got != want[i] {
				t.Errorf("%s %s: got %s want %s", b, filepath.Base(p), got, want[i])
			}
			if len(res.Digest) != b.DigestLen() {
				t.Errorf("%s: digest length %d", b, len(res.Digest))
			}
		}
	}
}

// Every route a Hasher can take gives the same known answers, with the
// identity of an lstat and no descriptor left open, whether the Hasher
// opens the file (Hash) or its caller did (Open, then HashOpen).
func TestKnownAnswersEveryRoute(t *testing.T) {
	paths := knownAnswerFiles(t)
	ways := map[string]func(h *Hasher, path string, b key.Backend) (Result, error){
		"Hash": func(h *Hasher, path string, b key.Backend) (Result, error) {
			return h.Hash(context.Background(), path, b)
		},
		"HashOpen": func(h *Hasher, path string, b key.Backend) (Result, error) {
			f, err := Open(path)
			if err != nil {
				return Result{}, err
			}
			return h.HashOpen(context.Background(), f, b)
		},
	}
	for name, p := range everyRoute(t) {
		for way, hash := range ways {
			t.Run(name+"/"+way, func(t *testing.T) {
				h := New(p, nil)
				defer h.Close()
				for _, b := range key.Backends() {
					for i, path := range paths {
						res, err := hash(h, path, b)
						if err != nil {
							t.Fatalf("%s %s: %v", b, path, err)
						}
						if got, want := hex.EncodeToString(res.Digest), knownAnswers[b.Base()][i]; got != want {
							t.Errorf("%s %s: got %s want %s", b, filepath.Base(path), got, want)
						}
						if fi, err := fsstat.Lstat(path); err != nil || !res.Info.Same(fi) {
							t.Errorf("%s: result identity %+v, lstat %+v (%v)", path, res.Info, fi, err)
						}
					}
				}
				if open := openOf(t, paths); len(open) != 0 {
					t.Errorf("files left open: %v", open)
				}
			})
		}
	}
}

// everyRoute is a policy for each way a Hasher can hash a file. With
// "lanes", a small file is read by its caller for the engine's lanes, an
// empty one is hashed inline and a large one by the engine.
func everyRoute(t *testing.T) map[string]Policy {
	return map[string]Policy{
		"inline":       {InlineMax: 1 << 30},
		"pool":         {InlineMax: -1, Workers: 2},
		"small-buf":    {InlineMax: -1, BufferSize: 4096},
		"odd-buf":      {InlineMax: 1 << 30, BufferSize: 1000},
		"batch":        {InlineMax: -1, Batch: (&serialEngine{lanes: 4}).factory(), BatchMinStreams: 1},
		"lanes":        {InlineMax: 100 << 10, Batch: (&serialEngine{lanes: 4}).factory(), BatchMinStreams: 1},
		"sha256sum":    {InlineMax: -1, ExternalMin: 1, External: lookPath(t, "sha256sum")},
		"openssl-dgst": {InlineMax: -1, ExternalMin: 1, External: lookPath(t, "openssl")},
	}
}

func lookPath(t *testing.T, prog string) string {
	t.Helper()
	p, err := exec.LookPath(prog)
	if err != nil {
		t.Fatalf("%s is needed by this test: apt-get install coreutils openssl (%v)", prog, err)
	}
	return p
}

// refuses runs HashFile and Hasher.Hash on path in the background and fails
// the test unless both refuse it with ErrNotRegular; a blocking open would
// hang, which the deadline turns into a failure.
func refuses(t *testing.T, path string) {
	t.Helper()
	h := New(Policy{InlineMax: -1}, nil)
	defer h.Close()
	done := make(chan [2]error, 1)
	go func() {
		_, err1 := HashFile(context.Background(), path, key.SHA256E)
		_, err2 := h.Hash(context.Background(), path, key.SHA256E)
		done <- [2]error{err1, err2}
	}()
	select {
	case errs := <-done:
		for _, err := range errs {
			if !errors.Is(err, ErrNotRegular) {
				t.Errorf("%s: got %v, want ErrNotRegular", path, err)
			} else if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: hashing blocked", path)
	}
}

// oddFiles are one of each kind of file a hasher refuses, in a temporary
// directory: a FIFO, a listening socket, a symlink to target (a regular
// file beside them), and the directory itself.
type oddFiles struct{ dir, fifo, sock, link, target string }

func makeOddFiles(t *testing.T) oddFiles {
	t.Helper()
	dir := t.TempDir()
	o := oddFiles{dir: dir, fifo: filepath.Join(dir, "fifo"), sock: filepath.Join(dir, "sock"),
		link: filepath.Join(dir, "link.txt"), target: filepath.Join(dir, "target.txt")}
	if err := unix.Mkfifo(o.fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", o.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	writeFile(t, o.target, []byte("abc"))
	if err := os.Symlink(o.target, o.link); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestRefusesNonRegular(t *testing.T) {
	o := makeOddFiles(t)
	for _, p := range []string{o.fifo, o.sock, o.link, "/dev/null", o.dir} {
		refuses(t, p)
	}
}

func TestMissingFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "missing")
	_, err := HashFile(context.Background(), p, key.SHA256)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("got %v, want not-exist", err)
	}
}

// Root reads any file, so as root the unreadable case runs in a child
// process with the credentials of nobody.
func TestUnreadableFile(t *testing.T) {
	if os.Getuid() != 0 {
		path := filepath.Join(t.TempDir(), "secret.txt")
		writeFile(t, path, []byte("abc"))
		os.Chmod(path, 0)
		_, err := HashFile(context.Background(), path, key.SHA256)
		if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), path) {
			t.Fatalf("unreadable file: %v; want permission denied naming the file", err)
		}
		return
	}
	dir := t.TempDir()
	// nobody must reach the helper binary: open up the test's own temp dirs.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe := filepath.Join(dir, "hasher.test")
	copyFile(t, os.Args[0], exe, 0o755)
	secret := filepath.Join(dir, "secret.txt")
	writeFile(t, secret, []byte("abc"))
	if err := os.Chmod(secret, 0); err != nil {
		t.Fatal(err)
	}
	readable := filepath.Join(dir, "open.txt")
	writeFile(t, readable, []byte("abc"))
	run := func(path string) (string, error) {
		cmd := exec.Command(exe, path)
		cmd.Env = append(os.Environ(), childEnv+"=hashfile")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(readable)
	if err != nil || strings.TrimSpace(out) != knownAnswers[key.SHA256][1] {
		t.Fatalf("helper as nobody on a readable file: %v %q", err, out)
	}
	out, err = run(secret)
	if err == nil || !strings.Contains(out, "permission denied") || !strings.Contains(out, secret) {
		t.Fatalf("unreadable file: err %v, output %q; want permission denied naming the file", err, out)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, mode); err != nil {
		t.Fatal(err)
	}
}

// withHook runs f with testHookAfterRead set.
func withHook(t *testing.T, hook func(string), f func()) {
	t.Helper()
	testHookAfterRead = hook
	defer func() { testHookAfterRead = nil }()
	f()
}

// waitClockTick waits until the file system's timestamp clock has moved past
// path's ctime (kernels without fine-grained timestamps advance it only
// every few milliseconds), so that the next change gives a new ctime.
func waitClockTick(t *testing.T, path string) {
	t.Helper()
	var was unix.Stat_t
	if err := unix.Stat(path, &was); err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(filepath.Dir(path), ".tick")
	defer os.Remove(probe)
	for range 1000 {
		writeFile(t, probe, nil)
		var st unix.Stat_t
		if err := unix.Stat(probe, &st); err != nil {
			t.Fatal(err)
		}
		if st.Ctim.Nano() > was.Ctim.Nano() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the file system clock did not move in a second")
}

func TestChangesBetweenReadAndCheck(t *testing.T) {
	cases := map[string]func(t *testing.T, path string){
		"append": func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte("more"))
			f.Close()
		},
		"rewrite-same-size": func(t *testing.T, path string) {
			before, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			waitClockTick(t, path)
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt([]byte("X"), 10)
			f.Close()
			// Put the mtime back as it was: only ctime tells.
			os.Chtimes(path, before.ModTime(), before.ModTime())
		},
		"rename-over": func(t *testing.T, path string) {
			other := path + ".new"
			writeFile(t, other, pattern(300<<10))
			if err := os.Rename(other, path); err != nil {
				t.Fatal(err)
			}
		},
		"removed": func(t *testing.T, path string) { os.Remove(path) },
		"replaced-by-fifo": func(t *testing.T, path string) {
			os.Remove(path)
			unix.Mkfifo(path, 0o644)
		},
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f.bin")
			writeFile(t, path, pattern(300<<10))
			var err error
			withHook(t, func(string) { change(t, path) }, func() {
				_, err = HashFile(context.Background(), path, key.SHA256E)
			})
			var ce *ChangedError
			if !errors.Is(err, ErrChanged) || !errors.As(err, &ce) || ce.Path != path {
				t.Fatalf("got %v, want *ChangedError for %s", err, path)
			}
			if name == "removed" && !strings.Contains(err.Error(), "removed") {
				t.Errorf("error %q does not say the file was removed", err)
			}
		})
	}
}

// A file appended to by another goroutine while it is hashed is reported as
// changed; once the writer stops, hashing it again gives the right digest.
func TestAppendWhileHashing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "growing.bin")
	content := pattern(32 << 20)
	writeFile(t, path, content)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	// started counts appends begun, landed those whose write returned.
	var started, landed atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			started.Add(1)
			f.Write([]byte("x"))
			content = append(content, 'x')
			mu.Unlock()
			landed.Add(1)
			time.Sleep(50 * time.Microsecond)
		}
	}()
	// On a loaded machine the writer may not run while a file is read, and
	// then the file did not change: the hooks make sure an append lands
	// between the first read and the check. An append already begun at the
	// first read may have landed before the first lstat, which the hasher
	// rightly does not see as a change: only one begun after it counts.
	var atFirstRead atomic.Int64
	testHookRead = func(string) { atFirstRead.CompareAndSwap(-1, started.Load()) }
	testHookAfterRead = func(string) {
		for deadline := time.Now().Add(10 * time.Second); landed.Load() <= atFirstRead.Load() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	defer func() { testHookRead, testHookAfterRead = nil, nil }()
	h := New(Policy{InlineMax: -1}, nil)
	defer h.Close()
	for i := 0; i < 3; i++ {
		atFirstRead.Store(-1)
		_, err1 := HashFile(context.Background(), path, key.SHA256E)
		atFirstRead.Store(-1)
		_, err2 := h.Hash(context.Background(), path, key.SHA256E)
		for _, err := range []error{err1, err2} {
			if !errors.Is(err, ErrChanged) {
				close(stop)
				wg.Wait()
				t.Fatalf("hash while appending: got %v, want ErrChanged", err)
			}
		}
	}
	testHookRead, testHookAfterRead = nil, nil
	close(stop)
	wg.Wait()
	res, err := h.Hash(context.Background(), path, key.SHA256E)
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(content)
	if !bytes.Equal(res.Digest, want[:]) || res.Info.Size != int64(len(content)) {
		t.Fatalf("after the writer stopped: digest %x size %d, want %x size %d", res.Digest, res.Info.Size, want, len(content))
	}
}

func TestResultInfoMatchesLstat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.txt")
	writeFile(t, path, []byte("abc"))
	res, err := HashFile(context.Background(), path, key.SHA256E)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	if res.Info.Ino != st.Ino || res.Info.Size != 3 || res.Info.MtimeNs != st.Mtim.Nano() || !res.Info.IsRegular() {
		t.Fatalf("Info %+v does not match lstat %+v", res.Info, st)
	}
}

func TestCancelled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.bin")
	writeFile(t, path, pattern(4<<20))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := HashFile(ctx, path, key.SHA256); !errors.Is(err, context.Canceled) {
		t.Fatalf("HashFile: got %v, want context.Canceled", err)
	}
	h := New(Policy{InlineMax: -1}, nil)
	defer h.Close()
	if _, err := h.Hash(ctx, path, key.SHA256); !errors.Is(err, context.Canceled) {
		t.Fatalf("Hash: got %v, want context.Canceled", err)
	}
}

func TestUnknownBackend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a")
	writeFile(t, path, nil)
	if _, err := HashFile(context.Background(), path, key.Unknown); !errors.Is(err, ErrBackend) {
		t.Fatalf("got %v, want ErrBackend", err)
	}
}

// A file truncated while it is read is reported as changed, with and
// without read-ahead.
func TestTruncatedWhileReading(t *testing.T) {
	for _, ahead := range []int64{-1, 1} {
		path := filepath.Join(t.TempDir(), "shrinking.bin")
		writeFile(t, path, pattern(1<<20))
		reads := 0
		testHookRead = func(string) {
			if reads++; reads == 2 {
				if err := os.Truncate(path, 100<<10); err != nil {
					t.Error(err)
				}
			}
		}
		_, err := hashFile(context.Background(), path, key.SHA256, nil, readOpts{bufSize: 64 << 10, readAhead: ahead})
		testHookRead = nil
		if !errors.Is(err, ErrChanged) {
			t.Errorf("read-ahead %d: got %v, want ErrChanged", ahead, err)
		}
	}
}

// A file that changes while an external program hashes it is reported as
// changed, not given the program's digest.
func TestExternalChangedWhileHashing(t *testing.T) {
	inner := lookPath(t, "sha256sum")
	dir := t.TempDir()
	path := filepath.Join(dir, "f.bin")
	other := filepath.Join(dir, "other.bin")
	t.Setenv("HASHER_TEST_FILE", path)
	t.Setenv("HASHER_TEST_OTHER", other)
	for name, change := range map[string]string{
		"append":      `printf more >>"$HASHER_TEST_FILE"`,
		"rename-over": `mv "$HASHER_TEST_OTHER" "$HASHER_TEST_FILE"`,
	} {
		t.Run(name, func(t *testing.T) {
			writeFile(t, path, pattern(300<<10))
			writeFile(t, other, pattern(300<<10))
			prog := filepath.Join(t.TempDir(), "sha256sum")
			writeFile(t, prog, []byte("#!/bin/sh\n"+change+"\nexec "+inner+"\n"))
			if err := os.Chmod(prog, 0o755); err != nil {
				t.Fatal(err)
			}
			h := New(Policy{InlineMax: -1, ExternalMin: 1, External: prog}, nil)
			defer h.Close()
			res, err := h.Hash(context.Background(), path, key.SHA256)
			var ce *ChangedError
			if !errors.As(err, &ce) || ce.Path != path || res.Digest != nil {
				t.Fatalf("got digest %x, error %v; want *ChangedError for %s", res.Digest, err, path)
			}
		})
	}
}
