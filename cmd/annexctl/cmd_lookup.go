package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
)

// batchChunk is the most paths sent in one request in --batch mode; fewer
// are sent when no more input is waiting, so interactive use gets an answer
// per line at once.
const batchChunk = 4096

// batchChunkBytes bounds the path bytes of one --batch request: even a
// chunk of paths whose every byte JSON escapes six-fold stays under the
// daemon's limit on a request body (16 MiB).
const batchChunkBytes = 2 << 20

type lookupOpts struct {
	batch, nul, json, wait bool
	timeout                time.Duration
}

func newLookupCmd() *cobra.Command {
	var o lookupOpts
	cmd := &cobra.Command{
		Use:   "lookup [--batch [-z]] [--json] [--wait] FILE...",
		Short: "Print the git-annex key of each FILE from the index",
		Long: `Print the git-annex key of each FILE, one per line, as the daemon has it
indexed, like "git annex lookupkey". The key is always current: if a file
changed since it was indexed, annexd hashes it now, or (without --wait)
reports it as pending.

Relative paths are resolved against the current directory (symlinks in it
are kept as written; if that is outside the daemon's roots, the directory's
symlinks are resolved and the lookup retried).

A locked git-annex file (a symlink into .git/annex/objects) answers with
the key it names, as "git annex lookupkey" does.

A FILE that is not indexed gets a message on stderr and exit status 1.
With --batch, paths are read from stdin, one per line (NUL-terminated with
-z), and one line is printed per path: the key, or an empty line when there
is none; the exit status is 1 when any path had none.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if o.batch && len(args) > 0 {
				return &exitError{Code: exitUsage, Err: errors.New("lookup: --batch reads paths from stdin; give no FILE arguments")}
			}
			if !o.batch && len(args) == 0 {
				return &exitError{Code: exitUsage, Err: errors.New("lookup: give at least one FILE, or --batch")}
			}
			if o.nul && !o.batch {
				return &exitError{Code: exitUsage, Err: errors.New("lookup: -z only applies to --batch")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			if o.timeout > 0 {
				ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
				defer cancel()
				cmd.SetContext(ctx)
			}
			if o.batch {
				err = runLookupBatch(cmd, c, o)
			} else {
				err = runLookup(cmd, c, o, args)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				return &exitError{Code: exitFailure, Err: fmt.Errorf("lookup: gave up after --timeout %v", o.timeout)}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.batch, "batch", false, "read paths from stdin, print one line per path")
	f.BoolVarP(&o.nul, "nul", "z", false, "with --batch: input paths are NUL-terminated")
	f.BoolVar(&o.json, "json", false, "print one JSON object per path (see docs/cli.md)")
	f.BoolVar(&o.wait, "wait", false, "wait until changed or new files are indexed instead of reporting them pending")
	f.DurationVar(&o.timeout, "timeout", 0, "give up after this long (0: never), e.g. with --wait")
	return cmd
}

// runLookup looks up the FILE arguments in one request.
func runLookup(cmd *cobra.Command, c *api.Client, o lookupOpts, args []string) error {
	cwd, err := os.Getwd()
	if err != nil {
		return &exitError{Code: exitFailure, Err: fmt.Errorf("lookup: current directory: %w", err)}
	}
	inputs := make([][]byte, len(args))
	for i, a := range args {
		inputs[i] = []byte(a)
	}
	res, err := lookupPaths(cmd.Context(), c, inputs, cwd, o.wait)
	if err != nil {
		return apiFailure(c, err)
	}
	out := bufio.NewWriter(cmd.OutOrStdout())
	failed := false
	for i, r := range res {
		switch {
		case o.json:
			out.Write(append(r.AppendJSON(nil), '\n'))
		case hasKey(r):
			fmt.Fprintln(out, r.Key.String())
		}
		if !hasKey(r) {
			failed = true
			out.Flush()
			fmt.Fprintf(cmd.ErrOrStderr(), "annexctl: %s: %s\n", args[i], stateMessage(r))
		}
	}
	if err := flushOut(out); err != nil {
		return err
	}
	if failed {
		return &exitError{Code: exitFailure}
	}
	return nil
}

// hasKey reports whether r answers with a key: the file's current one,
// or the one a git-annex symlink names (as git annex lookupkey prints).
func hasKey(r api.LookupResult) bool {
	return r.State == api.StateCurrent || r.State == api.StateAnnexLink
}

// stateMessage says why a path has no current key.
func stateMessage(r api.LookupResult) string {
	msg := ""
	switch r.State {
	case api.StatePending:
		msg = "not indexed yet (new or changed; use --wait to wait for it)"
	case api.StateMissing:
		msg = "no such file"
	case api.StateNotRegular:
		msg = "not a regular file (only regular files have keys)"
	case api.StateIgnored:
		msg = "not indexed: matches annexd's ignore patterns"
	case api.StateUnreadable:
		msg = "not indexed: unreadable"
	case api.StateCorrupt:
		msg = "content no longer matches its recorded key " + r.Key.String() + " (corrupt)"
	case api.StateUntraced:
		msg = "content no longer matches its recorded key " + r.Key.String() +
			" (untraced: only the ctime moved; an edit annexd did not see, or rot)"
	case api.StateAbsent:
		return "not here: " + absentMessage(r)
	case api.StateOutsideRoots:
		return "not under any directory annexd watches (" + r.Message + ")"
	case api.StateInvalid:
		return "invalid path: " + r.Message
	default:
		msg = "not indexed (" + string(r.State) + ")"
	}
	if r.Message != "" {
		msg += ": " + r.Message
	}
	return msg
}

// absPath makes p absolute against cwd and cleans it lexically; symlinks
// are kept as written.
func absPath(p []byte, cwd string) []byte {
	s := string(p)
	if !filepath.IsAbs(s) {
		s = filepath.Join(cwd, s)
	}
	return []byte(filepath.Clean(s))
}

// resolveDir resolves the symlinks in the directory part of an absolute
// path, keeping the last component as it is (the daemon never follows a
// final symlink). It returns nil when nothing changes or resolution fails.
func resolveDir(p []byte) []byte {
	dir, base := filepath.Split(string(p))
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil
	}
	out := []byte(filepath.Join(real, base))
	if string(out) == string(p) {
		return nil
	}
	return out
}

// lookupPaths looks up inputs (absolute or relative to cwd) in one request
// and answers in order; paths outside the roots are retried once with the
// symlinks of their directory resolved.
func lookupPaths(ctx context.Context, c *api.Client, inputs [][]byte, cwd string, wait bool) ([]api.LookupResult, error) {
	paths := make([][]byte, len(inputs))
	for i, in := range inputs {
		paths[i] = absPath(in, cwd)
	}
	res, err := lookupMany(ctx, c, paths, wait)
	if err != nil {
		return nil, err
	}
	return res, retryOutside(ctx, c, paths, res, wait)
}

// checkAnswers makes sure that res answers paths one for one, so that no
// key is ever printed for a path it was not computed for.
func checkAnswers(paths [][]byte, res []api.LookupResult) error {
	if len(res) != len(paths) {
		return fmt.Errorf("%w: %d answers for %d paths", api.ErrBadResponse, len(res), len(paths))
	}
	for i, r := range res {
		if r.State != api.StateInvalid && !bytes.Equal(r.Path, paths[i]) {
			return fmt.Errorf("%w: answer %d is for %q, not %q", api.ErrBadResponse, i+1, r.Path, paths[i])
		}
	}
	return nil
}

// lookupMany asks for paths in one request: a GET for one path (the
// common case, and the cheaper request), a batch POST for more.
func lookupMany(ctx context.Context, c *api.Client, paths [][]byte, wait bool) ([]api.LookupResult, error) {
	if len(paths) == 1 {
		r, err := c.Lookup(ctx, paths[0], wait)
		if errors.Is(err, api.ErrOutsideRoots) {
			// The single-path endpoint refuses such paths with a 400; give
			// the caller the same answer a batch would.
			return []api.LookupResult{{Path: paths[0], State: api.StateOutsideRoots, Message: statusMessage(err)}}, nil
		}
		if err != nil {
			return nil, err
		}
		return []api.LookupResult{r}, checkAnswers(paths, []api.LookupResult{r})
	}
	res := make([]api.LookupResult, 0, len(paths))
	err := c.LookupBatch(ctx, paths, wait, func(r api.LookupResult) error {
		res = append(res, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, checkAnswers(paths, res)
}

// statusMessage is the daemon's message in err without the sentinel's
// text in front.
func statusMessage(err error) string {
	var se *api.StatusError
	if !errors.As(err, &se) {
		return err.Error()
	}
	msg := strings.TrimPrefix(se.Message, api.ErrOutsideRoots.Error()+": ")
	return strings.TrimPrefix(msg, "api: ")
}

// retryOutside looks up again, with resolved directories, the paths that
// were outside the roots; a retry that is still outside keeps the first
// answer.
func retryOutside(ctx context.Context, c *api.Client, paths [][]byte, res []api.LookupResult, wait bool) error {
	var idx []int
	var again [][]byte
	for i, r := range res {
		if r.State != api.StateOutsideRoots {
			continue
		}
		if p := resolveDir(paths[i]); p != nil {
			idx, again = append(idx, i), append(again, p)
		}
	}
	if len(again) == 0 {
		return nil
	}
	got, err := lookupMany(ctx, c, again, wait)
	if err != nil {
		return err
	}
	for j, r := range got {
		if r.State != api.StateOutsideRoots {
			res[idx[j]] = r
		}
	}
	return nil
}

// runLookupBatch answers stdin line by line. Lines are read ahead and sent
// in chunks (up to batchChunk, or whatever has arrived); up to two chunks
// are in flight at once and answers are written in input order.
func runLookupBatch(cmd *cobra.Command, c *api.Client, o lookupOpts) error {
	cwd, err := os.Getwd()
	if err != nil {
		return &exitError{Code: exitFailure, Err: fmt.Errorf("lookup: current directory: %w", err)}
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	delim := byte('\n')
	if o.nul {
		delim = 0
	}
	lines := make(chan []byte, 2*batchChunk)
	readErr := make(chan error, 1)
	go readItems(ctx, cmd.InOrStdin(), delim, lines, readErr)

	type job struct {
		inputs [][]byte
		res    []api.LookupResult
		err    error
		done   chan struct{}
	}
	jobs := make(chan *job, 2)
	go func() {
		defer close(jobs)
		for {
			chunk := nextChunk(lines)
			if chunk == nil {
				return
			}
			j := &job{inputs: chunk, done: make(chan struct{})}
			go func() {
				defer close(j.done)
				j.res, j.err = lookupChunk(ctx, c, j.inputs, cwd, o.wait)
			}()
			select {
			case jobs <- j:
			case <-ctx.Done():
				return
			}
		}
	}()

	out := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
	buf := make([]byte, 0, 512)
	failed := 0
	for j := range jobs {
		<-j.done
		if j.err != nil {
			out.Flush()
			return apiFailure(c, j.err)
		}
		for _, r := range j.res {
			buf = batchLine(buf[:0], r, o.json)
			out.Write(buf)
			if !hasKey(r) {
				failed++
			}
		}
		if err := out.Flush(); err != nil {
			return &exitError{Code: exitFailure, Err: fmt.Errorf("lookup: write: %w", err)}
		}
	}
	if err := <-readErr; err != nil {
		return &exitError{Code: exitFailure, Err: fmt.Errorf("lookup: read stdin: %w", err)}
	}
	if failed > 0 {
		// Every input was answered; the status says that some had no key.
		return &exitError{Code: exitFailure}
	}
	return nil
}

// batchLine formats one answer of --batch: the key or an empty line, or
// the JSON object.
func batchLine(buf []byte, r api.LookupResult, asJSON bool) []byte {
	if asJSON {
		return append(r.AppendJSON(buf), '\n')
	}
	if hasKey(r) {
		buf = append(buf, r.Key.String()...)
	}
	return append(buf, '\n')
}

// readItems sends each delim-terminated item of r (without delim) to out,
// then closes out and reports the read error (nil at EOF).
func readItems(ctx context.Context, r io.Reader, delim byte, out chan<- []byte, errc chan<- error) {
	defer close(out)
	br := bufio.NewReaderSize(r, 256<<10)
	for {
		line, err := br.ReadSlice(delim)
		if errors.Is(err, bufio.ErrBufferFull) {
			errc <- fmt.Errorf("input line longer than %d bytes", br.Size())
			return
		}
		if len(line) > 0 {
			item := line
			if item[len(item)-1] == delim {
				item = item[:len(item)-1]
			}
			if delim == '\n' && len(item) > 0 && item[len(item)-1] == '\r' {
				item = item[:len(item)-1]
			}
			select {
			case out <- append([]byte(nil), item...):
			case <-ctx.Done():
				errc <- nil
				return
			}
		}
		if err == io.EOF {
			errc <- nil
			return
		}
		if err != nil {
			errc <- err
			return
		}
	}
}

// nextChunk blocks for one item, then takes whatever else is already
// waiting, up to batchChunk items or batchChunkBytes. It returns nil when
// the input is done.
func nextChunk(lines <-chan []byte) [][]byte {
	first, ok := <-lines
	if !ok {
		return nil
	}
	chunk := make([][]byte, 1, 64)
	chunk[0] = first
	n := len(first)
	for len(chunk) < batchChunk && n < batchChunkBytes {
		select {
		case l, ok := <-lines:
			if !ok {
				return chunk
			}
			chunk = append(chunk, l)
			n += len(l)
		default:
			return chunk
		}
	}
	return chunk
}

// lookupChunk answers one chunk; empty input lines get an invalid answer
// without asking the daemon.
func lookupChunk(ctx context.Context, c *api.Client, inputs [][]byte, cwd string, wait bool) ([]api.LookupResult, error) {
	var ask [][]byte
	for _, in := range inputs {
		if len(in) > 0 {
			ask = append(ask, in)
		}
	}
	var got []api.LookupResult
	if len(ask) > 0 {
		var err error
		if got, err = lookupPaths(ctx, c, ask, cwd, wait); err != nil {
			return nil, err
		}
	}
	if len(ask) == len(inputs) {
		return got, nil
	}
	res := make([]api.LookupResult, len(inputs))
	for i, in := range inputs {
		if len(in) == 0 {
			res[i] = api.LookupResult{State: api.StateInvalid, Message: "empty line"}
			continue
		}
		res[i], got = got[0], got[1:]
	}
	return res, nil
}

// absentMessage says what the index remembers of a file whose file system
// is not mounted now: which one, its recorded key and its finding.
func absentMessage(r api.LookupResult) string {
	msg := r.Message
	if !r.Key.IsZero() {
		msg += "; recorded key " + r.Key.String()
	}
	if r.Finding != "" {
		msg += " (" + string(r.Finding) + ", as audit problems lists it)"
	}
	return msg
}
