// Command bareloop is the bare hash loop that annexd's initial index is
// measured against: a parallel lstat walk of a tree and crypto/sha256 of
// every regular file on a fixed number of workers, with no index, no watches
// and no key formatting. It prints the files, bytes and a digest of all
// digests, so two runs can be compared for correctness as well as speed.
//
// Usage: go run ./bench/bareloop [-workers N] [-readers N] TREE
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"time"
)

func main() {
	workers := flag.Int("workers", runtime.NumCPU(), "files hashed at once")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: bareloop [-workers N] TREE")
		os.Exit(2)
	}
	start := time.Now()
	paths := make(chan string, 1024)
	type result struct {
		path   string
		digest [32]byte
		size   int64
	}
	results := make(chan result, 1024)
	var wg sync.WaitGroup
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1<<20)
			h := sha256.New()
			for p := range paths {
				f, err := os.Open(p)
				if err != nil {
					fmt.Fprintln(os.Stderr, "bareloop:", err)
					continue
				}
				h.Reset()
				n, err := io.CopyBuffer(h, f, buf)
				f.Close()
				if err != nil {
					fmt.Fprintln(os.Stderr, "bareloop:", err)
					continue
				}
				var d [32]byte
				h.Sum(d[:0])
				results <- result{p, d, n}
			}
		}()
	}
	go func() {
		err := filepath.WalkDir(flag.Arg(0), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				fmt.Fprintln(os.Stderr, "bareloop:", err)
				return nil
			}
			if d.Type().IsRegular() {
				paths <- p
			}
			return nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "bareloop:", err)
		}
		close(paths)
		wg.Wait()
		close(results)
	}()
	var all []result
	var bytes int64
	for r := range results {
		all = append(all, r)
		bytes += r.size
	}
	took := time.Since(start)
	sort.Slice(all, func(i, j int) bool { return all[i].path < all[j].path })
	sum := sha256.New()
	for _, r := range all {
		sum.Write(r.digest[:])
	}
	fmt.Printf("files=%d bytes=%d took=%.3fs digests=%s\n", len(all), bytes, took.Seconds(),
		hex.EncodeToString(sum.Sum(nil))[:16])
}
