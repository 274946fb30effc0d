package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/key"
)

type whereisOpts struct {
	json, nul, wait, batch bool
}

func newWhereisCmd() *cobra.Command {
	var o whereisOpts
	var hosts bool // cmd_whereis_hosts.go
	cmd := &cobra.Command{
		Use:   "whereis [--json] [-z] [--wait] [--batch] KEY|FILE...",
		Short: "List every indexed file with the same content as KEY or FILE",
		Long: `List every indexed file whose content is that of KEY (a git-annex key such
as SHA256E-s1024--…) or of FILE (its current key), one path per line.
Duplicates are matched by digest, so a.JPG and b.jpg with the same bytes
are listed together; a key's size must match too. A path whose file
changed since it was indexed is named on stderr as "changed since
indexed"; one outside the daemon's roots (left from a run with other
roots, not checked since) as "outside the roots"; one that shares its
blocks with a file listed before it (a reflink, or a copy deduplicated)
as "shares its blocks with PATH": the two are one physical copy.

An argument that parses as a key and does not name an existing file is a
key; anything else is a file. With several arguments, or with --batch
(arguments read from stdin, one per line, NUL-terminated with -z), each
argument's list ends with an empty line (a NUL with -z), also when it is
empty. An argument with nothing found is named on stderr; the others are
still answered, and the exit status is 1.`,
		Example: `  annexctl whereis ~/Pictures/cat.jpg
  annexctl whereis SHA256E-s1024--e3b0….jpg other.jpg
  find . -name '*.iso' -print0 | annexctl whereis --batch -z`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case o.batch && len(args) > 0:
				return &exitError{Code: exitUsage, Err: errors.New("whereis: --batch reads its arguments from stdin; give none on the command line")}
			case !o.batch && len(args) == 0:
				return &exitError{Code: exitUsage, Err: errors.New("whereis: give at least one KEY or FILE, or --batch")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if hosts {
				return whereisHosts(cmd, args, o) // cmd_whereis_hosts.go
			}
			c, err := dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			cwd, err := os.Getwd()
			if err != nil {
				return &exitError{Code: exitFailure, Err: fmt.Errorf("whereis: current directory: %w", err)}
			}
			w := &whereis{cmd: cmd, c: c, o: o, cwd: cwd, out: bufio.NewWriter(cmd.OutOrStdout()),
				grouped: o.batch || len(args) > 1}
			if o.batch {
				err = w.batch()
			} else {
				for _, a := range args {
					if err = w.one(a); err != nil {
						break
					}
				}
			}
			return w.done(err)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.json, "json", false, "print one JSON object per location (see docs/cli.md)")
	f.BoolVarP(&o.nul, "nul", "z", false, "end each path with NUL instead of a newline (with --batch: NUL-terminated input too)")
	f.BoolVar(&o.wait, "wait", false, "for FILE: wait until it is indexed if it is new or changed")
	f.BoolVar(&o.batch, "batch", false, "read KEYs and FILEs from stdin, answer each with its list and an empty line")
	f.BoolVar(&hosts, "hosts", false, "list which machines hold the content, as the hub knows them (see docs/cli.md)")
	return cmd
}

// whereis answers the arguments of one command.
type whereis struct {
	cmd     *cobra.Command
	c       *api.Client
	o       whereisOpts
	cwd     string
	out     *bufio.Writer
	grouped bool // each answer ends with an empty line (NUL), or an end object in JSON batches
	failed  int
}

// batch answers stdin's arguments, one at a time, flushing each answer.
func (w *whereis) batch() error {
	ctx, cancel := context.WithCancel(w.cmd.Context())
	defer cancel()
	delim := byte('\n')
	if w.o.nul {
		delim = 0
	}
	items := make(chan []byte, 64)
	readErr := make(chan error, 1)
	go readItems(ctx, w.cmd.InOrStdin(), delim, items, readErr)
	for item := range items {
		if err := w.one(string(item)); err != nil {
			return err
		}
		if err := w.out.Flush(); err != nil {
			return &exitError{Code: exitFailure, Err: fmt.Errorf("whereis: write: %w", err)}
		}
	}
	if err := <-readErr; err != nil {
		return &exitError{Code: exitFailure, Err: fmt.Errorf("whereis: read stdin: %w", err)}
	}
	return nil
}

// one lists the locations of one argument. Only a failure of the daemon
// itself is an error; nothing found is counted in failed.
func (w *whereis) one(arg string) error {
	n := 0
	print := func(l api.Location) error {
		n++
		return w.location(arg, l)
	}
	var err error
	switch k, kerr := key.Parse(arg); {
	case arg == "":
		w.failed++
		w.out.Flush()
		fmt.Fprintln(w.cmd.ErrOrStderr(), "annexctl: whereis: an empty argument")
		w.end(arg, 0, "empty argument")
		return nil
	case kerr == nil && !exists(arg):
		err = w.c.WhereisKey(w.cmd.Context(), k, print)
	default:
		p := absPath([]byte(arg), w.cwd)
		err = w.c.WhereisPath(w.cmd.Context(), p, w.o.wait, print)
		if errors.Is(err, api.ErrOutsideRoots) {
			if q := resolveDir(p); q != nil {
				err = w.c.WhereisPath(w.cmd.Context(), q, w.o.wait, print)
			}
		}
	}
	msg, err := whereisResult(err, n)
	if err != nil {
		return apiFailure(w.c, err)
	}
	if msg != "" {
		w.failed++
		w.out.Flush()
		fmt.Fprintf(w.cmd.ErrOrStderr(), "annexctl: whereis: %s: %s\n", printableName(arg), msg)
	}
	w.end(arg, n, msg)
	return nil
}

// location prints one location of arg's content.
func (w *whereis) location(arg string, l api.Location) error {
	if w.o.json {
		buf := append(api.AppendPathJSON([]byte{'{'}, "query", []byte(arg)), ',')
		buf = append(buf, l.AppendJSON(nil)[1:]...) // the location's members after the query
		_, err := w.out.Write(append(buf, '\n'))
		return err
	}
	if l.Stale || l.OutsideRoots || l.SharesWith != nil {
		w.out.Flush()
	}
	if l.SharesWith != nil {
		fmt.Fprintf(w.cmd.ErrOrStderr(), "annexctl: %s: shares its blocks with %s (one physical copy)\n",
			printableName(string(l.Path)), printableName(string(l.SharesWith)))
	}
	if l.Stale {
		fmt.Fprintf(w.cmd.ErrOrStderr(), "annexctl: %s: changed since indexed\n", printableName(string(l.Path)))
	}
	if l.OutsideRoots {
		fmt.Fprintf(w.cmd.ErrOrStderr(), "annexctl: %s: outside the roots: not checked since an earlier run (annexctl forget drops it)\n",
			printableName(string(l.Path)))
	}
	w.out.Write(l.Path)
	return w.out.WriteByte(w.delim())
}

func (w *whereis) delim() byte {
	if w.o.nul {
		return 0
	}
	return '\n'
}

// end closes one argument's answer when answers are grouped.
func (w *whereis) end(arg string, n int, msg string) {
	switch {
	case !w.grouped:
	case w.o.json && w.o.batch:
		buf := api.AppendPathJSON([]byte(`{"end":true,`), "query", []byte(arg))
		buf = fmt.Appendf(buf, `,"count":%d`, n)
		if msg != "" {
			buf = fmt.Appendf(buf, `,"error":%s`, strconv.Quote(msg))
		}
		w.out.Write(append(buf, "}\n"...))
	case !w.o.json:
		w.out.WriteByte(w.delim())
	}
}

// done flushes the output and picks the exit status.
func (w *whereis) done(err error) error {
	if ferr := flushOut(w.out); err == nil {
		err = ferr
	}
	if err == nil && w.failed > 0 {
		return &exitError{Code: exitFailure}
	}
	return err
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// whereisResult says why an argument found nothing (msg), or returns the
// error that stops the command.
func whereisResult(err error, n int) (msg string, _ error) {
	var se *api.StatusError
	switch {
	case err == nil && n == 0:
		return "no indexed file has this content", nil
	case err == nil:
		return "", nil
	case errors.As(err, &se) && (se.Status == 400 || se.Status == 404):
		msg := strings.TrimPrefix(se.Message, "api: ")
		return strings.TrimPrefix(msg, "not found: "), nil
	}
	return "", err
}
