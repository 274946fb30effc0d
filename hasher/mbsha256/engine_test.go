package mbsha256

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
)

// testEngine is an engine under test with the drain threshold it uses.
type testEngine struct {
	name string
	e    *Engine
}

// assemblyKernels runs f for each assembly kernel of this build, skipping
// those the CPU cannot run with the feature it lacks.
func assemblyKernels(t *testing.T, f func(t *testing.T, k *kernel)) {
	t.Helper()
	if len(kernels()) == 0 {
		t.Skip("no assembly kernel in this build (purego tag or not amd64)")
	}
	for _, k := range kernels() {
		t.Run(k.name, func(t *testing.T) {
			if !k.have {
				t.Skipf("CPU lacks %s for kernel %s", k.missing, k.name)
			}
			f(t, k)
		})
	}
}

// engines returns every engine worth checking: each kernel the CPU has with
// the default drain threshold, with draining off and with draining as soon
// as the queue is empty, each with and without its finisher, the Go
// reference kernel (16 and 3 lanes), and the generic one.
func engines(t *testing.T) []testEngine {
	var es []testEngine
	for _, k := range kernels() {
		if !k.have {
			t.Logf("kernel %s not tested: CPU lacks %s", k.name, k.missing)
			continue
		}
		for _, min := range []int{newEngine(k).minLanes, k.minLanes, 0, k.lanes + 1} {
			e := newEngine(k)
			e.minLanes = min
			es = append(es, testEngine{fmt.Sprintf("%s/min%d", k.name, min), e})
			if e.finisher != nil {
				e = newEngine(k)
				e.minLanes, e.finisher = min, nil
				es = append(es, testEngine{fmt.Sprintf("%s/min%d/nofinisher", k.name, min), e})
			}
		}
	}
	for _, lanes := range []int{16, 3} {
		for _, min := range []int{0, 2} {
			e := newEngine(refKernel(lanes))
			e.minLanes = min
			es = append(es, testEngine{fmt.Sprintf("ref%d/min%d", lanes, min), e})
		}
	}
	return append(es, testEngine{Generic, newEngine(nil)}, testEngine{"zero", &Engine{}})
}

// randomBytes returns n bytes of a seeded stream (ChaCha8: the race
// detector slows a byte-by-byte fill eightfold).
func randomBytes(seed uint64, n int) []byte {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	b := make([]byte, n)
	rand.NewChaCha8(s).Read(b)
	return b
}

// choppyReader returns its data in reads of random sizes.
type choppyReader struct {
	data []byte
	r    *rand.Rand
}

func (c *choppyReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.data), 1+c.r.IntN(100_000))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func readersOf(inputs [][]byte, seed uint64) []io.Reader {
	rs := make([]io.Reader, len(inputs))
	for i, in := range inputs {
		if i%2 == 0 {
			rs[i] = bytes.NewReader(in)
		} else {
			rs[i] = &choppyReader{in, rand.New(rand.NewPCG(seed, uint64(i)))}
		}
	}
	return rs
}

func checkSums(t *testing.T, inputs [][]byte, sums [][32]byte) {
	t.Helper()
	if len(sums) != len(inputs) {
		t.Fatalf("%d sums for %d inputs", len(sums), len(inputs))
	}
	bad := 0
	for i, in := range inputs {
		if want := sha256.Sum256(in); sums[i] != want {
			if bad++; bad <= 5 {
				t.Errorf("input %d (%d bytes): got %x, want %x", i, len(in), sums[i], want)
			}
		}
	}
	if bad > 5 {
		t.Errorf("... %d wrong digests in all", bad)
	}
}

func checkResults(t *testing.T, inputs [][]byte, res []Result) {
	t.Helper()
	sums := make([][32]byte, len(res))
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("input %d: %v", i, r.Err)
		}
		if r.Size != int64(len(inputs[i])) {
			t.Errorf("input %d: size %d, want %d", i, r.Size, len(inputs[i]))
		}
		sums[i] = r.Sum
	}
	checkSums(t, inputs, sums)
}

// everyLength returns inputs of lengths 0…max, cut from one random buffer
// at varying offsets, in an order that mixes short and long ones.
func everyLength(max int) [][]byte {
	buf := randomBytes(7, 2*max+64)
	inputs := make([][]byte, max+1)
	for n := 0; n <= max; n++ {
		off := (n * 7919) % (max + 64)
		inputs[n] = buf[off : off+n]
	}
	rand.New(rand.NewPCG(3, 3)).Shuffle(len(inputs), func(i, j int) { inputs[i], inputs[j] = inputs[j], inputs[i] })
	return inputs
}

func TestKernelMatchesReference(t *testing.T) {
	assemblyKernels(t, func(t *testing.T, k *kernel) {
		ref := refKernel(k.lanes)
		r := rand.New(rand.NewPCG(1, 2))
		for nblocks := 1; nblocks <= 5; nblocks++ {
			var got, want [8][maxLanes]uint32
			for w := range got {
				for l := range got[w] {
					got[w][l] = r.Uint32()
				}
			}
			want = got
			var ptrs [maxLanes]*byte
			for l := 0; l < k.lanes; l++ {
				ptrs[l] = &randomBytes(r.Uint64(), 64*nblocks)[0]
			}
			k.block(&got, &ptrs, nblocks)
			ref.block(&want, &ptrs, nblocks)
			for w := range got {
				for l := 0; l < k.lanes; l++ {
					if got[w][l] != want[w][l] {
						t.Fatalf("%d blocks: word %d lane %d: got %08x, want %08x", nblocks, w, l, got[w][l], want[w][l])
					}
				}
			}
		}
	})
}

func TestSumManyEveryLength(t *testing.T) {
	inputs := everyLength(4096)
	for _, te := range engines(t) {
		t.Run(te.name, func(t *testing.T) {
			checkSums(t, inputs, te.e.SumMany(inputs))
		})
	}
}

func TestSumReadersEveryLength(t *testing.T) {
	inputs := everyLength(4096)
	for _, te := range engines(t) {
		t.Run(te.name, func(t *testing.T) {
			checkResults(t, inputs, te.e.SumReaders(context.Background(), readersOf(inputs, 5)))
		})
	}
}

// TestMixedSizes hashes streams spanning many chunks next to short ones, so
// lanes are refilled mid-batch and streams end at every point of a chunk.
func TestMixedSizes(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	buf := randomBytes(13, 1<<20)
	var inputs [][]byte
	for range 40 {
		n := r.IntN(len(buf))
		if r.IntN(2) == 0 {
			n = r.IntN(3 * ChunkSize)
		}
		off := r.IntN(len(buf) - n + 1)
		inputs = append(inputs, buf[off:off+n])
	}
	for _, te := range engines(t) {
		t.Run(te.name, func(t *testing.T) {
			checkResults(t, inputs, te.e.SumReaders(context.Background(), readersOf(inputs, 9)))
			checkSums(t, inputs, te.e.SumMany(inputs))
		})
	}
}

// TestLargeStreams hashes a few streams of random lengths up to 64 MiB with
// the assembly kernels, next to many short ones.
func TestLargeStreams(t *testing.T) {
	assemblyKernels(t, func(t *testing.T, k *kernel) {
		r := rand.New(rand.NewPCG(21, 22))
		big := randomBytes(23, 64<<20)
		inputs := [][]byte{big, big[:r.IntN(len(big))], big[r.IntN(len(big)):]}
		for range 30 {
			n := r.IntN(1 << 20)
			inputs = append(inputs, big[len(big)-n:])
		}
		r.Shuffle(len(inputs), func(i, j int) { inputs[i], inputs[j] = inputs[j], inputs[i] })
		e := newEngine(k)
		checkResults(t, inputs, e.SumReaders(context.Background(), readersOf(inputs, 24)))
	})
}

func TestReadErrorEndsOnlyItsStream(t *testing.T) {
	boom := errors.New("disk on fire")
	inputs := [][]byte{randomBytes(1, 300_000), randomBytes(2, 100), randomBytes(3, 200_000)}
	for _, te := range engines(t) {
		t.Run(te.name, func(t *testing.T) {
			rs := readersOf(inputs, 1)
			rs[1] = io.MultiReader(bytes.NewReader(inputs[1]), &failReader{boom})
			rs = append(rs, io.MultiReader(bytes.NewReader(randomBytes(4, 150_000)), &failReader{boom}))
			res := te.e.SumReaders(context.Background(), rs)
			for _, i := range []int{1, 3} {
				if !errors.Is(res[i].Err, boom) {
					t.Errorf("stream %d: err %v, want %v", i, res[i].Err, boom)
				}
			}
			checkResults(t, []([]byte){inputs[0], inputs[2]}, []Result{res[0], res[2]})
		})
	}
}

type failReader struct{ err error }

func (f *failReader) Read([]byte) (int, error) { return 0, f.err }

func TestCancelReportsEveryTakenStream(t *testing.T) {
	inputs := everyLength(300)
	for i := range inputs {
		inputs[i] = randomBytes(uint64(i), 200_000)
	}
	for _, te := range engines(t) {
		t.Run(te.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rs := readersOf(inputs, 2)
			taken, seen := 0, map[int]bool{}
			next := func() (io.Reader, bool) {
				if taken == len(rs) {
					return nil, false
				}
				taken++
				return rs[taken-1], true
			}
			canceled := 0
			err := te.e.Hash(ctx, next, func(i int, r Result) {
				if seen[i] {
					t.Errorf("stream %d reported twice", i)
				}
				seen[i] = true
				switch {
				case errors.Is(r.Err, context.Canceled):
					canceled++
				case r.Err != nil:
					t.Errorf("stream %d: %v", i, r.Err)
				case r.Sum != sha256.Sum256(inputs[i]):
					t.Errorf("stream %d: wrong digest", i)
				}
				cancel()
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Hash returned %v, want context.Canceled", err)
			}
			if len(seen) != taken {
				t.Errorf("%d streams taken, %d reported", taken, len(seen))
			}
			if taken == len(rs) {
				t.Errorf("every stream was taken despite the cancel")
			}
			if te.e.Lanes() > 1 && canceled == 0 {
				t.Errorf("no stream in flight was reported canceled")
			}
		})
	}
}

func TestNewKernel(t *testing.T) {
	for _, name := range Kernels() {
		e, err := NewKernel(name)
		if err != nil {
			t.Fatalf("NewKernel(%q): %v", name, err)
		}
		if e.Kernel() != name {
			t.Errorf("NewKernel(%q).Kernel() = %q", name, e.Kernel())
		}
	}
	if _, err := NewKernel("nosuch"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("NewKernel(nosuch): %v, want ErrUnsupported", err)
	}
	for _, k := range kernels() {
		if _, err := NewKernel(k.name); !k.have && !errors.Is(err, ErrUnsupported) {
			t.Errorf("NewKernel(%q) on a CPU without %s: %v, want ErrUnsupported", k.name, k.missing, err)
		}
	}
	want := Generic
	for _, k := range kernels() {
		if k.have && k.auto {
			want = k.name
			break
		}
	}
	if got := New().Kernel(); got != want {
		t.Errorf("New picked %s, want %s of %v", got, want, Kernels())
	}
}

func FuzzSumMany(f *testing.F) {
	f.Add([]byte("abc"), []byte{0, 3, 200})
	f.Add(randomBytes(1, 5000), []byte{55, 56, 63, 64, 119, 120})
	var es []*Engine
	for _, k := range kernels() {
		if k.have {
			es = append(es, newEngine(k))
		}
	}
	es = append(es, newEngine(refKernel(5)))
	f.Fuzz(func(t *testing.T, data []byte, cuts []byte) {
		// Each cut byte takes the next 0…255×4 bytes of data as one input;
		// at most 40 inputs and 64 KiB, so that each run stays cheap.
		cuts = cuts[:min(len(cuts), 39)]
		data = data[:min(len(data), 64<<10)]
		var inputs [][]byte
		for _, c := range cuts {
			n := min(int(c)*4, len(data))
			inputs = append(inputs, data[:n])
			data = data[n:]
		}
		inputs = append(inputs, data)
		for _, e := range es {
			checkSums(t, inputs, e.SumMany(inputs))
			checkResults(t, inputs, e.SumReaders(context.Background(), readersOf(inputs, 1)))
		}
	})
}

// cancelReader cancels a context once n bytes have been read from it.
type cancelReader struct {
	r      io.Reader
	n      int
	cancel context.CancelFunc
}

func (c *cancelReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.n -= n; c.n <= 0 {
		c.cancel()
	}
	return n, err
}

// TestCancelWhileFinishing cancels while a batch too small to fill the lanes
// is being finished (by the finisher lanes or crypto/sha256).
func TestCancelWhileFinishing(t *testing.T) {
	inputs := [][]byte{randomBytes(1, 900_000), randomBytes(2, 500_000), randomBytes(3, 700_000), randomBytes(4, 300_000)}
	for _, te := range engines(t) {
		t.Run(te.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rs := readersOf(inputs, 3)
			rs[0] = &cancelReader{rs[0], 400_000, cancel}
			res := te.e.SumReaders(ctx, rs)
			canceled := 0
			for i, r := range res {
				switch {
				case errors.Is(r.Err, context.Canceled):
					canceled++
				case r.Err != nil:
					t.Errorf("stream %d: %v", i, r.Err)
				case r.Sum != sha256.Sum256(inputs[i]):
					t.Errorf("stream %d: wrong digest", i)
				}
			}
			if canceled == 0 {
				t.Errorf("no stream was reported canceled")
			}
		})
	}
}

func TestSumReadersCanceledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, te := range engines(t) {
		res := te.e.SumReaders(ctx, readersOf([][]byte{{1}, {2}, {3}}, 1))
		for i, r := range res {
			if !errors.Is(r.Err, context.Canceled) {
				t.Errorf("%s: stream %d: err %v, want context.Canceled", te.name, i, r.Err)
			}
		}
	}
}

func TestNilReaderIsAnError(t *testing.T) {
	in := randomBytes(5, 100_000)
	for _, te := range engines(t) {
		res := te.e.SumReaders(context.Background(), []io.Reader{bytes.NewReader(in), nil})
		if !errors.Is(res[1].Err, ErrNilReader) {
			t.Errorf("%s: nil reader: err %v, want ErrNilReader", te.name, res[1].Err)
		}
		if res[0].Err != nil || res[0].Sum != sha256.Sum256(in) {
			t.Errorf("%s: the other stream: %v, %x", te.name, res[0].Err, res[0].Sum)
		}
	}
}

// TestStreamsInFlightBoundedByLanes checks the documented bound that lets a
// caller open each file only when Hash asks for it.
func TestStreamsInFlightBoundedByLanes(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	var inputs [][]byte
	for range 100 {
		inputs = append(inputs, randomBytes(r.Uint64(), r.IntN(300_000)))
	}
	for _, te := range engines(t) {
		t.Run(te.name, func(t *testing.T) {
			taken, inFlight, most := 0, 0, 0
			next := func() (io.Reader, bool) {
				if taken == len(inputs) {
					return nil, false
				}
				taken++
				inFlight++
				most = max(most, inFlight)
				return bytes.NewReader(inputs[taken-1]), true
			}
			err := te.e.Hash(context.Background(), next, func(i int, r Result) {
				inFlight--
				if r.Err != nil || r.Sum != sha256.Sum256(inputs[i]) {
					t.Errorf("stream %d: %v, wrong or missing digest", i, r.Err)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if inFlight != 0 || taken != len(inputs) {
				t.Errorf("%d streams taken, %d never reported", taken, inFlight)
			}
			if most > te.e.Lanes() {
				t.Errorf("%d streams in flight at once, more than %d lanes", most, te.e.Lanes())
			}
		})
	}
}

// Streams in memory and readers share the lanes, and a feed that runs dry
// for a moment is asked again: an engine that never drains hashes in one
// call what the feed yields later, and one told more comes Soon waits for
// it, whatever its drain threshold. Every digest is crypto/sha256's.
func TestHashFeedMixedPausedAndSoon(t *testing.T) {
	var inputs [][]byte
	for i := range 70 {
		inputs = append(inputs, randomBytes(uint64(i), (i*i*131)%(300<<10)+i%3))
	}
	for _, pause := range []Feed{Dry, Soon} {
		for _, te := range engines(t) {
			t.Run(fmt.Sprintf("%d/%s", pause, te.name), func(t *testing.T) {
				i, paused := 0, 0
				next := func(wait bool) (Input, Feed) {
					if i == len(inputs) {
						return Input{}, Dry
					}
					// A pause every third stream while something is in
					// flight: a queue its callers fill bit by bit.
					if i > 0 && i%3 == 0 && paused < i && !(pause == Soon && wait) {
						paused = i
						return Input{}, pause
					}
					i++
					if i%2 == 0 {
						return Input{R: bytes.NewReader(inputs[i-1])}, Taken
					}
					return Input{Data: inputs[i-1]}, Taken
				}
				got := make(map[int]Result)
				calls := 0
				for i < len(inputs) {
					before := i
					calls++
					if err := te.e.HashFeed(context.Background(), next, func(j int, r Result) { got[before+j] = r }); err != nil {
						t.Fatal(err)
					}
				}
				if (pause == Soon || (te.e.k != nil && te.e.minLanes == 0)) && calls != 1 {
					t.Errorf("%d calls: the engine returned while the feed only paused", calls)
				}
				if len(got) != len(inputs) {
					t.Fatalf("%d results for %d inputs", len(got), len(inputs))
				}
				for j, in := range inputs {
					if r := got[j]; r.Err != nil || r.Size != int64(len(in)) || r.Sum != sha256.Sum256(in) {
						t.Errorf("input %d (%d bytes): %+v", j, len(in), r)
					}
				}
			})
		}
	}
}

// A stream left alone in its lanes while the feed is dry for a moment is
// hashed on by slices, and the feed is asked again between them: a stream
// that comes later joins the same call (and the kernel) instead of waiting
// for the first to be finished alone to its end. Both digests are
// crypto/sha256's, whether the first stream's state moved from the lanes
// to crypto/sha256 and back once or several times.
func TestDryFeedAskedBetweenSlices(t *testing.T) {
	// One long stream is moved on alone, three by the finisher's lanes
	// where there is one: either way the feed is asked again between
	// slices, and a stream that comes meanwhile joins them in the lanes.
	late := randomBytes(42, 3*aloneSlice+77)
	for _, streams := range []int{1, 3} {
		var long [][]byte
		for i := range streams {
			long = append(long, randomBytes(uint64(41+10*i), 5*max(aloneSlice, finisherSlice)+12345*(i+1)))
		}
		for _, dry := range []int{1, 3} {
			for _, te := range engines(t) {
				t.Run(fmt.Sprintf("long%d/dry%d/%s", streams, dry, te.name), func(t *testing.T) {
					calls := 0
					next := func(bool) (Input, Feed) {
						calls++
						switch {
						case calls <= streams:
							return Input{R: bytes.NewReader(long[calls-1])}, Taken
						case calls == streams+1+dry:
							return Input{R: &choppyReader{late, rand.New(rand.NewPCG(5, 6))}}, Taken
						}
						return Input{}, Dry
					}
					got := make(map[int]Result)
					hashes := 0
					for calls < streams+1+dry {
						hashes++
						before := len(got)
						if err := te.e.HashFeed(context.Background(), next, func(j int, r Result) { got[before+j] = r }); err != nil {
							t.Fatal(err)
						}
					}
					if te.e.k != nil && hashes != 1 {
						t.Errorf("%d calls of HashFeed: the long streams were finished before the feed was asked again", hashes)
					}
					for j, in := range append(long[:len(long):len(long)], late) {
						if r := got[j]; r.Err != nil || r.Size != int64(len(in)) || r.Sum != sha256.Sum256(in) {
							t.Errorf("stream %d (%d bytes): %+v", j, len(in), r)
						}
					}
				})
			}
		}
	}
}

// finishingEngines are the engines, with their default drain threshold,
// of the kernels that hand their last streams to a finisher.
func finishingEngines(t *testing.T) []testEngine {
	var out []testEngine
	for _, k := range kernels() {
		if e := newEngine(k); k.have && e.finisher != nil {
			out = append(out, testEngine{k.name, e})
		}
	}
	if len(out) == 0 {
		t.Skip("no kernel of this CPU hands its last streams to a finisher")
	}
	return out
}

// Two streams drained into the finisher: the shorter ends with two padding
// blocks, one of them still pending when the finisher's slice ends, so it
// is handed back with its padded end in the lane's own tail.
func TestFinisherGivesBackHalfPaddedStream(t *testing.T) {
	a := randomBytes(1, (finisherSlice/64)*64+36)
	b := randomBytes(2, (finisherSlice/64-1)*64+60) // 60 bytes left: two padding blocks
	inputs := [][]byte{a, b}
	for _, te := range finishingEngines(t) {
		t.Run(te.name, func(t *testing.T) {
			res := te.e.SumReaders(context.Background(), []io.Reader{bytes.NewReader(a), bytes.NewReader(b)})
			for i, r := range res {
				if r.Err != nil || r.Sum != sha256.Sum256(inputs[i]) {
					t.Errorf("reader %d (%d bytes): sum %x, want %x (err %v)", i, len(inputs[i]), r.Sum, sha256.Sum256(inputs[i]), r.Err)
				}
			}
			for i, s := range te.e.SumMany(inputs) {
				if s != sha256.Sum256(inputs[i]) {
					t.Errorf("memory input %d (%d bytes): wrong sum", i, len(inputs[i]))
				}
			}
		})
	}
}

// Random mixes of streams near multiples of the finisher's slice, in memory
// or read, fed with dry spells between them: every stream is reported once,
// with crypto/sha256's digest.
func TestRandomFinisherHandBacks(t *testing.T) {
	for _, te := range finishingEngines(t) {
		t.Run(te.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 8))
			bad := 0
			for iter := range 40 {
				var ins [][]byte
				for i := range 2 + r.IntN(5) {
					size := ((finisherSlice/64)*(1+r.IntN(2))+r.IntN(5)-2)*64 + r.IntN(128)
					if r.IntN(3) == 0 {
						size = r.IntN(600 << 10)
					}
					ins = append(ins, randomBytes(uint64(iter*10+i), size))
				}
				mem, dryEvery := r.IntN(2) == 0, 1+r.IntN(3)
				calls, fed := 0, 0
				next := func(bool) (Input, Feed) {
					calls++
					if fed == len(ins) || (fed > 1 && calls%dryEvery != 0) {
						return Input{}, Dry
					}
					fed++
					if mem {
						return Input{Data: ins[fed-1]}, Taken
					}
					return Input{R: bytes.NewReader(ins[fed-1])}, Taken
				}
				got, seen := map[int]Result{}, map[int]int{}
				for len(got) < len(ins) {
					base := len(got)
					if err := te.e.HashFeed(context.Background(), next, func(j int, res Result) {
						got[base+j] = res
						seen[base+j]++
					}); err != nil {
						t.Fatal(err)
					}
				}
				for j, in := range ins {
					if seen[j] != 1 || got[j].Err != nil || got[j].Sum != sha256.Sum256(in) {
						if bad++; bad <= 5 {
							t.Errorf("iteration %d, stream %d (%d bytes, in memory %v): reported %d times, %+v", iter, j, len(in), mem, seen[j], got[j])
						}
					}
				}
			}
		})
	}
}

// cancelAfter reads r and cancels after n reads.
type cancelAfter struct {
	r      *bytes.Reader
	n      int
	cancel func()
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	if c.n--; c.n == 0 {
		c.cancel()
	}
	return c.r.Read(p)
}

// A context ended while streams are in the finisher's lanes reports every
// stream taken exactly once, and the engine hashes right afterwards.
func TestCancelInFinisherReportsOnce(t *testing.T) {
	for _, te := range finishingEngines(t) {
		for _, reads := range []int{1, 4, 17, 37} {
			for _, streams := range []int{2, 3, 6} {
				t.Run(fmt.Sprintf("%s/%d/%d", te.name, reads, streams), func(t *testing.T) {
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					i := 0
					next := func(bool) (Input, Feed) {
						if i == streams {
							return Input{}, Dry
						}
						i++
						var rd io.Reader = bytes.NewReader(randomBytes(uint64(i), 3*finisherSlice+i*1000))
						if i == 1 {
							rd = &cancelAfter{r: bytes.NewReader(randomBytes(uint64(i), 3*finisherSlice)), n: reads, cancel: cancel}
						}
						return Input{R: rd}, Taken
					}
					seen := map[int]int{}
					if err := te.e.HashFeed(ctx, next, func(j int, r Result) { seen[j]++ }); !errors.Is(err, context.Canceled) {
						t.Fatalf("HashFeed = %v, want context.Canceled", err)
					}
					for j := range i {
						if seen[j] != 1 {
							t.Errorf("stream %d reported %d times", j, seen[j])
						}
					}
					data := randomBytes(99, 2*finisherSlice+5)
					res := te.e.SumReaders(context.Background(), []io.Reader{bytes.NewReader(data), bytes.NewReader(data[:finisherSlice+70])})
					if res[0].Sum != sha256.Sum256(data) || res[1].Sum != sha256.Sum256(data[:finisherSlice+70]) {
						t.Error("wrong digests after the cancel")
					}
				})
			}
		}
	}
}
