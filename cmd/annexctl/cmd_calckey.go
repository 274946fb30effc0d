package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"runtime"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/key"
)

// changedRetries is how often calckey rehashes a file that changed while
// it was read before giving up on it.
const changedRetries = 3

func newCalckeyCmd() *cobra.Command {
	var (
		backendName string
		batch, nul  bool
	)
	cmd := &cobra.Command{
		Use:   "calckey [--backend NAME] [--batch [-z]] FILE...",
		Short: "Print the git-annex key of each file, as `git annex calckey` does",
		Long: `Print the git-annex key of each FILE, one per line in the order given, byte for
byte what "git annex calckey --backend NAME FILE" prints. No git repository
or daemon is needed. Files are hashed in parallel.

Only regular files are hashed. A directory, symlink, FIFO, socket or device,
or a file that cannot be read, gets a message naming it on stderr, the other
files are still processed, and the exit status is 1. (git-annex itself hashes
a symlink's target and reads FIFOs and devices; pass the target path of a
symlink instead.) To hash a whole tree:

  find DIR -type f -print0 | annexctl calckey --batch -z

With --batch, file names are read from stdin, one per line (NUL-terminated
with -z), and one line is written for each as soon as it is known: the key,
or an empty line when the file cannot be hashed, as git-annex does.`,
		Example: `  annexctl calckey photo.jpg
  annexctl calckey --backend BLAKE2B256 *.mkv
  find ~/Pictures -type f -print0 | annexctl calckey --batch -z`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCalckey(cmd, backendName, batch, nul, args)
		},
	}
	cmd.Flags().StringVarP(&backendName, "backend", "b", key.Default.String(), "key backend: "+backendNames())
	_ = cmd.RegisterFlagCompletionFunc("backend", cobra.FixedCompletions(backendList(), cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().BoolVar(&batch, "batch", false, "read file names from stdin, answer one line each")
	cmd.Flags().BoolVarP(&nul, "nul", "z", false, "with --batch: file names on stdin are NUL-terminated")
	return cmd
}

func runCalckey(cmd *cobra.Command, backendName string, batch, nul bool, args []string) error {
	b, err := key.ParseBackend(backendName)
	if err != nil || !hasher.Supported(b) {
		return &exitError{Code: exitUsage, Err: fmt.Errorf("calckey: unknown backend %q; use one of %s", backendName, backendNames())}
	}
	switch {
	case batch && len(args) > 0:
		return &exitError{Code: exitUsage, Err: errors.New("calckey: --batch reads file names from stdin; do not also name files")}
	case nul && !batch:
		return &exitError{Code: exitUsage, Err: errors.New("calckey: -z only applies with --batch")}
	case !batch && len(args) == 0:
		return &exitError{Code: exitUsage, Err: errors.New("calckey: name at least one file, or use --batch")}
	}
	// No calibration here (it would cost up to a second per call): the
	// defaults, plus the multi-buffer engine, which hashes several queued
	// large SHA-256 files in parallel lanes and falls back to one file at a
	// time when only one is queued.
	p := hasher.DefaultPolicy()
	p.Batch = hasher.MultiBuffer
	h := hasher.New(p, nil)
	defer h.Close()
	c := calckey{h: h, backend: b, stdout: cmd.OutOrStdout(), stderr: cmd.ErrOrStderr(), batch: batch}
	names := make(chan string)
	readErr := make(chan error, 1)
	go func() {
		defer close(names)
		if batch {
			readErr <- readCalckeyNames(cmd.Context(), cmd.InOrStdin(), nul, names)
			return
		}
		for _, a := range args {
			names <- a
		}
		readErr <- nil
	}()
	failed, err := c.run(cmd.Context(), names)
	if err == nil {
		err = <-readErr
	}
	if err != nil {
		return &exitError{Code: exitFailure, Err: fmt.Errorf("calckey: %w", err)}
	}
	if failed > 0 {
		return &exitError{Code: exitFailure}
	}
	return nil
}

func backendNames() string { return strings.Join(backendList(), ", ") }

// backendList names the backends this build hashes.
func backendList() []string {
	var names []string
	for _, b := range key.Backends() {
		if hasher.Supported(b) {
			names = append(names, b.String())
		}
	}
	return names
}

// readCalckeyNames sends the names read from r, split on newlines or NULs.
func readCalckeyNames(ctx context.Context, r io.Reader, nul bool, out chan<- string) error {
	sep := byte('\n')
	if nul {
		sep = 0
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data, sep); i >= 0 {
			return i + 1, data[:i], nil
		}
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	})
	for sc.Scan() {
		select {
		case out <- sc.Text():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return sc.Err()
}

// calckey hashes names in parallel and prints their keys in input order.
type calckey struct {
	h       *hasher.Hasher
	backend key.Backend
	stdout  io.Writer
	stderr  io.Writer
	batch   bool
}

type calckeyItem struct {
	path string
	done chan struct{}
	line string // the key, or "" when err != nil
	err  error
}

// run returns the number of names that could not be hashed; its error is a
// failure to write the output.
func (c calckey) run(ctx context.Context, names <-chan string) (int, error) {
	// Enough in flight to keep the pool and the inline hashers busy while
	// the oldest file is still being hashed.
	window := make(chan *calckeyItem, 8*runtime.NumCPU())
	go func() {
		defer close(window)
		for name := range names {
			p := &calckeyItem{path: name, done: make(chan struct{})}
			window <- p
			go c.hash(ctx, p)
		}
	}()
	out := bufio.NewWriterSize(c.stdout, 64<<10)
	failed := 0
	var werr error
	flush := func() {
		if err := out.Flush(); err != nil && werr == nil {
			werr = err
		}
	}
	for {
		// Flush before waiting, so that a program driving --batch line by
		// line gets each answer as soon as it is known.
		var p *calckeyItem
		var ok bool
		select {
		case p, ok = <-window:
		default:
			flush()
			p, ok = <-window
		}
		if !ok {
			break
		}
		select {
		case <-p.done:
		default:
			flush()
			<-p.done
		}
		if p.err != nil {
			failed++
			fmt.Fprintf(c.stderr, "annexctl: calckey: %s\n", calckeyMessage(p.path, p.err))
			if !c.batch {
				continue
			}
		}
		if _, err := out.WriteString(p.line + "\n"); err != nil && werr == nil {
			werr = err
		}
	}
	flush()
	return failed, werr
}

func (c calckey) hash(ctx context.Context, p *calckeyItem) {
	defer close(p.done)
	var res hasher.Result
	for try := 0; ; try++ {
		res, p.err = c.h.Hash(ctx, p.path, c.backend)
		if !errors.Is(p.err, hasher.ErrChanged) || try == changedRetries {
			break
		}
	}
	if p.err != nil {
		return
	}
	k, err := key.FromDigest(c.backend, res.Digest, res.Info.Size, p.path, key.ExtRule{})
	if err != nil {
		p.err = err
		return
	}
	p.line = k.String()
}

// calckeyMessage words err for a user, naming path once.
func calckeyMessage(path string, err error) string {
	name := printableName(path)
	var nr *hasher.NotRegularError
	var pe *fs.PathError
	switch {
	case errors.As(err, &nr) && nr.Type == "directory":
		return fmt.Sprintf("%s: is a directory; to hash the files in it: find %s -type f -print0 | annexctl calckey --batch -z", name, shellQuote(path))
	case errors.As(err, &nr) && nr.Type == "symlink":
		return fmt.Sprintf("%s: is a symlink; calckey hashes regular files only, pass the target's path instead", name)
	case errors.As(err, &nr):
		return fmt.Sprintf("%s: is a %s; calckey hashes regular files only", name, nr.Type)
	case errors.Is(err, hasher.ErrChanged):
		return fmt.Sprintf("%s: kept changing while being hashed (%d tries); try again when it is no longer written to", name, changedRetries+1)
	case errors.As(err, &pe) && errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("%s: no such file", name)
	case errors.As(err, &pe):
		return fmt.Sprintf("%s: %s: %v", name, pe.Op, pe.Err)
	}
	return fmt.Sprintf("%s: %v", name, err)
}

// printableName leaves printable names alone and quotes the others, so a name
// with a newline or invalid UTF-8 cannot garble the message.
func printableName(s string) string {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return strconv.Quote(s)
	}
	return s
}

// shellQuote quotes s for a POSIX shell unless it is plainly safe.
func shellQuote(s string) string {
	safe := s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r == '+' || r == ',' || r == ':' || r == '@' ||
			'0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z')
	})
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
