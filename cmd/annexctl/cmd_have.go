package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/key"
)

// haveChunk is how many files have asks about in one round: one lookup,
// the hashing, one have request and the hub for the ones not here.
const haveChunk = 1024

type haveOpts struct {
	missing, json, nul, noHub bool
}

func newHaveCmd() *cobra.Command {
	var o haveOpts
	cmd := &cobra.Command{
		Use:   "have [--missing] [--json | -z] [--no-hub] PATH...",
		Short: "Tell, for each file under PATH, whether its content is indexed already",
		Long: `For each file at or below PATH (a camera card, a download folder, a USB disk),
tell whether the index holds its content already: here (and where), on a
file system the index remembers that is not mounted now (absent), on
another host (through the hub, when there is one), or nowhere (missing).

annexctl hashes the files itself, with the daemon's backend; a file under
the daemon's roots whose record is current answers from the index without
being hashed. Exit 0 when every file's content is had, 1 when some is
missing, 5 when a file could not be read.`,
		Example: `  annexctl have /media/card
  annexctl have --missing -z ~/Downloads | xargs -0 cp -t ~/Pictures/import`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &exitError{Code: exitUsage, Err: errors.New("have: name at least one file or folder")}
			}
			if o.json && o.nul {
				return &exitError{Code: exitUsage, Err: errors.New("have: --json and -z do not go together")}
			}
			c, err := dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			return runHave(cmd, c, o, args)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.missing, "missing", false, "list only the files whose content is nowhere (the ones to import)")
	f.BoolVar(&o.json, "json", false, "print one JSON object per file (see docs/cli.md)")
	f.BoolVarP(&o.nul, "nul", "z", false, "end each answer with NUL instead of a newline")
	f.BoolVar(&o.noHub, "no-hub", false, "do not ask the hub about content not here")
	return cmd
}

// haveFile is one file asked about and what was found of it.
type haveFile struct {
	name   string // as walked from the argument
	abs    []byte
	key    key.Key
	err    error
	copies []api.HaveCopy
	hub    *api.HubContent
}

// runHave walks the arguments and answers their files chunk by chunk.
func runHave(cmd *cobra.Command, c *api.Client, o haveOpts, args []string) error {
	ctx := cmd.Context()
	b, err := c.HaveBackend(ctx)
	if err != nil {
		return apiFailure(c, err)
	}
	cwd, err := os.Getwd()
	if err != nil {
		return &exitError{Code: exitFailure, Err: fmt.Errorf("have: current directory: %w", err)}
	}
	h := newHaveHasher(b)
	defer h.h.Close()
	out := newHaveOut(cmd, o)
	files := make(chan haveFile, haveChunk)
	go func() {
		defer close(files)
		for _, a := range args {
			walkHave(ctx, a, cwd, files)
		}
	}()
	for chunk := nextHaveChunk(files); len(chunk) > 0; chunk = nextHaveChunk(files) {
		if err := answerChunk(ctx, c, h, chunk); err != nil {
			return apiFailure(c, err)
		}
		if !o.noHub {
			o.noHub = hubAnswers(ctx, c, chunk, cmd.ErrOrStderr())
		}
		if err := out.print(chunk); err != nil {
			return err
		}
	}
	return out.status()
}

// nextHaveChunk takes up to haveChunk files.
func nextHaveChunk(files <-chan haveFile) []haveFile {
	var chunk []haveFile
	for f := range files {
		chunk = append(chunk, f)
		if len(chunk) == haveChunk {
			break
		}
	}
	return chunk
}

// walkHave sends arg's regular files, or arg itself with the error that
// stops it being hashed. Symlinks and special files met in a folder are
// skipped: they hold no content of their own.
func walkHave(ctx context.Context, arg, cwd string, out chan<- haveFile) {
	send := func(name string, err error) bool {
		select {
		case out <- haveFile{name: name, abs: absPath([]byte(name), cwd), err: err}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	fi, err := os.Lstat(arg)
	if err != nil || !fi.IsDir() {
		send(arg, err)
		return
	}
	filepath.WalkDir(arg, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			if !send(p, err) {
				return ctx.Err()
			}
			return nil
		case d.Type().IsRegular():
			if !send(p, nil) {
				return ctx.Err()
			}
		}
		return nil
	})
}

// answerChunk fills in each file's key (from the index when current,
// else hashed here) and its copies in the index.
func answerChunk(ctx context.Context, c *api.Client, h haveHasher, chunk []haveFile) error {
	if err := keysFromIndex(ctx, c, chunk); err != nil {
		return err
	}
	h.hashRest(ctx, chunk)
	return copiesOf(ctx, c, chunk)
}

// hubAnswers asks the hub about the chunk's files that are not here. It
// returns true when the hub is not to be asked again: the daemon has no
// hub link, or the hub could not be asked (said once on stderr; the
// files it was not asked about stay missing).
func hubAnswers(ctx context.Context, c *api.Client, chunk []haveFile, stderr io.Writer) bool {
	err := askHub(ctx, c, chunk)
	switch {
	case err == nil:
		return false
	case !errors.Is(err, api.ErrNoHub):
		fmt.Fprintf(stderr, "annexctl: have: the hub could not be asked, so files not here count as missing: %s\n", statusMessage(err))
	}
	return true
}

// keysFromIndex takes the key of each file under the roots whose record
// is current, as lookup does; the others are left for hashing.
func keysFromIndex(ctx context.Context, c *api.Client, chunk []haveFile) error {
	var idx []int
	var paths [][]byte
	for i, f := range chunk {
		if f.err == nil {
			idx, paths = append(idx, i), append(paths, f.abs)
		}
	}
	if len(paths) == 0 {
		return nil
	}
	res, err := lookupPaths(ctx, c, paths, "/", false)
	if err != nil {
		return err
	}
	for j, r := range res {
		if r.State == api.StateCurrent {
			chunk[idx[j]].key = r.Key
		}
	}
	return nil
}

// haveHasher hashes files here, as calckey does, with the daemon's
// backend.
type haveHasher struct {
	h       *hasher.Hasher
	backend key.Backend
}

func newHaveHasher(b key.Backend) haveHasher {
	p := hasher.DefaultPolicy()
	p.Batch = hasher.MultiBuffer
	return haveHasher{h: hasher.New(p, nil), backend: b}
}

// hashRest hashes, in parallel, the files that have neither a key nor an
// error yet.
func (h haveHasher) hashRest(ctx context.Context, chunk []haveFile) {
	sem := make(chan struct{}, 8*runtime.NumCPU())
	var wg sync.WaitGroup
	for i := range chunk {
		f := &chunk[i]
		if f.err != nil || !f.key.IsZero() {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f.key, f.err = h.keyOf(ctx, f.name)
		})
	}
	wg.Wait()
}

// keyOf hashes one file, again when it changed while it was read.
func (h haveHasher) keyOf(ctx context.Context, path string) (key.Key, error) {
	var res hasher.Result
	var err error
	for try := 0; ; try++ {
		res, err = h.h.Hash(ctx, path, h.backend)
		if !errors.Is(err, hasher.ErrChanged) || try == changedRetries {
			break
		}
	}
	if err != nil {
		return key.Key{}, err
	}
	return key.FromDigest(h.backend, res.Digest, res.Info.Size, path, key.ExtRule{})
}

// copiesOf asks the index for the copies of each hashed file's content.
func copiesOf(ctx context.Context, c *api.Client, chunk []haveFile) error {
	var idx []int
	var keys []key.Key
	for i, f := range chunk {
		if f.err == nil {
			idx, keys = append(idx, i), append(keys, f.key)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	j := 0
	return c.Have(ctx, keys, func(a api.HaveAnswer) error {
		chunk[idx[j]].copies = a.Copies
		j++
		return nil
	})
}
