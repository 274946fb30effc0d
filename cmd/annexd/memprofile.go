//go:build memprofile

// Built only with -tags memprofile (bench/memory.sh PROFILE=DIR): the
// daemon writes a heap profile to $ANNEXD_HEAP_PROFILE/heap-NNNN.pb.gz
// every second, for `go tool pprof`. Release builds have none of it.

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"
)

func init() {
	dir := os.Getenv("ANNEXD_HEAP_PROFILE")
	if dir == "" {
		return
	}
	go func() {
		for i := 0; ; i++ {
			time.Sleep(time.Second)
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("heap-%04d.pb.gz", i)))
			if err != nil {
				return
			}
			_ = pprof.Lookup("heap").WriteTo(f, 0)
			_ = f.Close()
		}
	}()
}
