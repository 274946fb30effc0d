package hasher

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
)

// ExternalKind is the command-line convention of an external SHA-256 program.
type ExternalKind string

// The external programs the hasher knows how to drive and parse.
const (
	KindSHA256Sum ExternalKind = "sha256sum" // coreutils: sha256sum < FILE
	KindOpenSSL   ExternalKind = "openssl"   // openssl dgst -sha256 < FILE
)

// ExternalKindOf derives the convention from a program's base name.
func ExternalKindOf(program string) (ExternalKind, error) {
	base := filepath.Base(program)
	switch {
	case strings.Contains(base, "sha256sum"):
		return KindSHA256Sum, nil
	case strings.Contains(base, "openssl"):
		return KindOpenSSL, nil
	}
	return "", fmt.Errorf("%w: %q is neither sha256sum nor openssl", ErrExternal, program)
}

func (k ExternalKind) args() []string {
	if k == KindOpenSSL {
		return []string{"dgst", "-sha256"}
	}
	return nil
}

// The only outputs accepted, for input on stdin; compiled on first use, so
// that a program linking the hasher pays nothing for them at start.
var (
	sha256sumOut = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\A([0-9a-f]{64})  -\n\z`) })
	opensslOut   = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`\A(?:SHA2-256|SHA256)?\(stdin\)= ([0-9a-f]{64})\n\z`)
	})
)

func (k ExternalKind) parse(out []byte) ([]byte, error) {
	re := sha256sumOut()
	if k == KindOpenSSL {
		re = opensslOut()
	}
	m := re.FindSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("%w: unexpected output %q", ErrExternal, truncate(out, 120))
	}
	return hex.DecodeString(string(m[1]))
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// externalHasher runs one program over files.
type externalHasher struct {
	path string
	kind ExternalKind
}

// hashFileExternal hashes a regular file with an external SHA-256 program.
// The program reads the descriptor this process opened and checked (on its
// stdin), not the path, so it hashes exactly the inode whose identity is
// compared before and after the run.
func (e externalHasher) hashFile(ctx context.Context, path string, before *fsstat.FileInfo, o readOpts) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	f, err := openStable(path, before)
	if err != nil {
		return Result{}, err
	}
	defer f.close()
	digest, _, err := e.run(ctx, f.fd)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := f.makeDurable(o); err != nil {
		return Result{}, err
	}
	if err := f.verify(); err != nil {
		return Result{}, err
	}
	return Result{Digest: digest, Info: f.before}, nil
}

// RunExternal hashes the regular file at path with program (sha256sum or
// openssl) as a Hasher does, the program reading a descriptor this process
// opened on its stdin, and returns the digest and the CPU time the program
// used. Calibration measures with it.
func RunExternal(ctx context.Context, program, path string) ([]byte, time.Duration, error) {
	kind, err := ExternalKindOf(program)
	if err != nil {
		return nil, 0, err
	}
	f, err := openStable(path, nil)
	if err != nil {
		return nil, 0, err
	}
	defer f.close()
	return externalHasher{path: program, kind: kind}.run(ctx, f.fd)
}

// run hashes what the program reads from a duplicate of fd, and returns the
// CPU time the program used.
func (e externalHasher) run(ctx context.Context, fd int) ([]byte, time.Duration, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: dup: %v", ErrExternal, err)
	}
	in := os.NewFile(uintptr(dup), "stdin")
	defer in.Close()
	return e.runStdin(ctx, in)
}

func (e externalHasher) runStdin(ctx context.Context, in *os.File) ([]byte, time.Duration, error) {
	cmd := exec.CommandContext(ctx, e.path, e.kind.args()...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.Stdin = in
	var out, errOut limitedBuffer
	out.max, errOut.max = 4096, 4096
	cmd.Stdout, cmd.Stderr = &out, &errOut
	// Once ctx ends and the program is killed, do not wait long for a
	// child it left holding the output pipes.
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		return nil, 0, fmt.Errorf("%w: %s: %v: %s", ErrExternal, e.path, err, bytes.TrimSpace(errOut.Bytes()))
	}
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	d, err := e.kind.parse(out.Bytes())
	if err != nil {
		return nil, cpu, fmt.Errorf("%s: %w", e.path, err)
	}
	return d, cpu, nil
}

// limitedBuffer keeps at most max bytes and then reports overflow by keeping
// one more, which no accepted output matches.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max + 1 - b.Len(); room > 0 {
		b.Buffer.Write(truncate(p, room))
	}
	return len(p), nil
}
