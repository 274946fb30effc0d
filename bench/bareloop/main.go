// Command bareloop is the bare hash loop that annexd's initial index is
// measured against: a walk of a tree (getdents with d_type, no lstat) and
// crypto/sha256 of every regular file on a fixed number of workers, with no
// index, no watches, no stat checks and no key formatting.
//
// It prints the files, the bytes, its CPU time and a digest over every
// (path, digest) pair that does not depend on the order files finish in,
// so two runs can be compared for correctness as well as speed. With
// -manifest it also checks each digest against a gen_corpus.py or
// gen_tree.py manifest and exits 1 on any difference.
//
// Usage: go run ./bench/bareloop [-workers N] [-manifest FILE] TREE
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"
)

type result struct {
	path   string
	digest [32]byte
	size   int64
}

func main() {
	workers := flag.Int("workers", runtime.NumCPU(), "files hashed at once")
	manifest := flag.String("manifest", "", "check every digest against this manifest (relpath, size, sha256 columns)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: bareloop [-workers N] [-manifest FILE] TREE")
		os.Exit(2)
	}
	root := flag.Arg(0)
	start := time.Now()
	paths := make(chan string, 1024)
	results := make(chan result, 1024)
	var wg sync.WaitGroup
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hashAll(paths, results)
		}()
	}
	go func() {
		walk(root, paths)
		close(paths)
		wg.Wait()
		close(results)
	}()
	var want map[string]string
	if *manifest != "" {
		want = readManifest(*manifest)
	}
	var files, nbytes int64
	var sum [32]byte
	bad := 0
	for r := range results {
		files++
		nbytes += r.size
		pair := sha256.Sum256(append([]byte(r.path+"\x00"), r.digest[:]...))
		for i := range sum {
			sum[i] ^= pair[i]
		}
		if want != nil {
			rel, _ := filepath.Rel(root, r.path)
			if w, ok := want[rel]; !ok || w != hex.EncodeToString(r.digest[:]) {
				bad++
				fmt.Fprintf(os.Stderr, "bareloop: %s: digest %x, manifest %q\n", rel, r.digest, w)
			}
		}
	}
	took := time.Since(start)
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	fmt.Printf("files=%d bytes=%d took=%.3fs cpu=%.3fs maxrss_kib=%d digests=%s\n", files, nbytes, took.Seconds(),
		cpu.Seconds(), ru.Maxrss, hex.EncodeToString(sum[:8]))
	if want != nil && (bad > 0 || int(files) != len(want)) {
		fmt.Fprintf(os.Stderr, "bareloop: %d digests differ; %d files hashed, %d in the manifest\n", bad, files, len(want))
		os.Exit(1)
	}
}

func walk(root string, paths chan<- string) {
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
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
}

func hashAll(paths <-chan string, results chan<- result) {
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
}

// readManifest maps each relative path to its hex SHA-256.
func readManifest(name string) map[string]string {
	f, err := os.Open(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bareloop:", err)
		os.Exit(2)
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		cols := bytes.Split(sc.Bytes(), []byte("\t"))
		if len(cols) >= 3 {
			m[string(cols[0])] = string(cols[2])
		}
	}
	return m
}
