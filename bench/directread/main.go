// Command directread measures what a direct read costs the CPU, by the
// size of the reads and the pages of the buffer: it reads FILE from the
// device with O_DIRECT (package directio) once per case and round, and
// prints the CPU-s (user + system, getrusage) and the wall time per GiB.
// The cases: reads of 1 MiB into ordinary pages (directio.Buffer, the
// audit's reads before huge pages), of 1 MiB into a huge page shared by
// two buffers, and of 2 MiB into a huge page each (directio.Buffers). The
// file should be at least 256 MiB, on the disk to measure; its pages in
// the page cache do not matter (the reads go past it). Interrupt work the
// kernel does on another CPU is not counted: read the ratios, on an
// otherwise quiet machine.
//
// Usage: go run ./bench/directread [-rounds N] FILE
package main

import (
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/directio"
)

type readCase struct {
	name string
	buf  func() []byte
}

var cases = []readCase{
	{"1 MiB, ordinary pages", func() []byte { return directio.Buffer(1 << 20) }},
	{"1 MiB, a huge page for two", func() []byte { return directio.Buffers(2, 1<<20)[0] }},
	{"2 MiB, a huge page each", func() []byte { return directio.Buffers(1, 2<<20)[0] }},
}

func main() {
	rounds := flag.Int("rounds", 3, "rounds of every case, alternated")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: directread [-rounds N] FILE")
		os.Exit(2)
	}
	path := flag.Arg(0)
	for r := 1; r <= *rounds; r++ {
		for _, c := range cases {
			cpu, wall, gib, err := readAll(path, c.buf())
			if err != nil {
				fmt.Fprintln(os.Stderr, "directread:", err)
				os.Exit(1)
			}
			fmt.Printf("round %d  %-28s %.3f CPU-s/GiB  %.2f s/GiB\n", r, c.name, cpu/gib, wall/gib)
		}
	}
}

// readAll reads path to its end with O_DIRECT into buf, and returns the
// CPU-s and seconds it took and the GiB read.
func readAll(path string, buf []byte) (cpu, wall, gib float64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, 0, 0, err
	}
	df, err := directio.Open(int(f.Fd()), st.Dev)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("%s: no direct reads: %w", path, err)
	}
	defer df.Close()
	before, began := cpuTime(), time.Now()
	var off int64
	for off < st.Size {
		want := int(min(int64(len(buf)), st.Size-off))
		n, err := df.ReadAt(buf, off, want)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("%s at %d: %w", path, off, err)
		}
		off += int64(n)
	}
	return cpuTime() - before, time.Since(began).Seconds(), float64(off) / (1 << 30), nil
}

func cpuTime() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
