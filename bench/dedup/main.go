// Command dedup is the benchmark driver bench/dedup.sh runs: it indexes a
// tree into a new index, or runs internal/dedup over an index, and prints
// one JSON line of figures. It stands in for `annexctl dedup` until the
// daemon serves deduplication.
//
//	dedup index INDEX TREE        hash every regular file below TREE into INDEX
//	dedup run [-hardlink] [-dry-run] INDEX TREE
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/internal/dedup"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dedup index INDEX TREE | dedup run [-hardlink] [-dry-run] INDEX TREE")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "index":
		err = withStore(os.Args[2], func(st *store.Store) error { return index(st, os.Args[3]) })
	case "run":
		fl := flag.NewFlagSet("run", flag.ExitOnError)
		hardlink := fl.Bool("hardlink", false, "hardlink mode")
		dry := fl.Bool("dry-run", false, "plan only")
		prof := fl.String("cpuprofile", "", "write a CPU profile to this file")
		workers := fl.Int("workers", 0, "groups worked on at once (0: the default)")
		fl.Parse(os.Args[2:])
		if *prof != "" {
			f, perr := os.Create(*prof)
			if perr != nil {
				err = perr
				break
			}
			pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
		err = withStore(fl.Arg(0), func(st *store.Store) error { return run(st, fl.Arg(1), *hardlink, *dry, *workers) })
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "dedup:", err)
		os.Exit(1)
	}
}

func withStore(path string, fn func(*store.Store) error) error {
	st, err := store.Open(path, store.Options{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { st.Run(ctx) })
	err = fn(st)
	cancel()
	wg.Wait()
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	return err
}

// index hashes the tree on one worker per CPU and records every file.
func index(st *store.Store, tree string) error {
	tree, err := filepath.Abs(tree)
	if err != nil {
		return err
	}
	start := time.Now()
	paths := make(chan string, 1024)
	writes := make(chan error, 1)
	go func() {
		var first error
		for done := range pending {
			first = cmpOr(first, <-done)
		}
		writes <- first
	}()
	var files, bytes atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range runtime.NumCPU() {
		wg.Go(func() {
			for p := range paths {
				if err := record(st, p, &files, &bytes); err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
				}
			}
		})
	}
	err = filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			paths <- p
		}
		return err
	})
	close(paths)
	wg.Wait()
	close(pending)
	if werr := <-writes; werr != nil {
		firstErr = cmpOr(firstErr, werr)
	}
	return report(map[string]any{"files": files.Load(), "bytes": bytes.Load(),
		"seconds": time.Since(start).Seconds()}, cmpOr(err, firstErr))
}

func record(st *store.Store, p string, files, bytes *atomic.Int64) error {
	hashed := time.Now().UnixNano()
	res, err := hasher.HashFile(context.Background(), p, key.SHA256E)
	if err != nil {
		return err
	}
	fi := res.Info
	r := store.Record{Backend: key.SHA256E, Digest: res.Digest, Size: fi.Size, MtimeNs: fi.MtimeNs,
		CtimeNs: fi.CtimeNs, Dev: fi.Dev, Ino: fi.Ino, HashedAt: hashed, VerifiedAt: hashed, State: store.StateOK}
	files.Add(1)
	bytes.Add(fi.Size)
	done := make(chan error, 1)
	st.Submit(store.Change{Op: store.OpPut, Path: []byte(p), Record: r}, func(err error) { done <- err })
	pending <- done
	return nil
}

// pending carries the answers of submitted writes, in order, to index.
var pending = make(chan chan error, 4096)

// run plans and applies one deduplication of tree.
func run(st *store.Store, tree string, hardlink, dry bool, workers int) error {
	abs, err := filepath.Abs(tree)
	if err != nil {
		return err
	}
	req := dedup.Request{PlanOptions: dedup.PlanOptions{Paths: [][]byte{[]byte(abs)}}}
	opt := dedup.Options{Workers: workers}
	if hardlink {
		req.Mode = dedup.Hardlink
		opt.Intents = dedup.NewMetaIntents(st)
	}
	d := dedup.New(st, opt)
	start := time.Now()
	plan, err := d.Plan(context.Background(), req)
	if err != nil {
		return err
	}
	planned := time.Since(start)
	out := map[string]any{"planned": plan.Actions, "plan_frees": plan.Frees, "already_shared": plan.Shared,
		"no_blocks": plan.NoBlocks, "plan_seconds": planned.Seconds()}
	if !dry {
		res, err := d.Apply(context.Background(), plan, req)
		out["done"], out["freed"], out["skipped"] = res.Done, res.Freed, res.Skipped
		if err != nil {
			out["error"] = err.Error()
		}
	}
	out["seconds"] = time.Since(start).Seconds()
	return report(out, nil)
}

func report(v map[string]any, err error) error {
	b, jerr := json.Marshal(v)
	if jerr != nil {
		return jerr
	}
	fmt.Println(string(b))
	return err
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
