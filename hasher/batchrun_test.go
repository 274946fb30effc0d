package hasher

import (
	"context"
	"crypto/sha256"
	"runtime"
	"testing"
	"weak"

	"github.com/annexd/annexd/hasher/mbsha256"
)

// bareHasher is a Hasher with no workers: the test plays the engine.
func bareHasher(queue int) *Hasher {
	return &Hasher{bat: make(chan *job, queue), base: context.Background()}
}

// queueSmall queues a batch job of data, as hashInLanes does.
func queueSmall(h *Hasher, data *[]byte) *job {
	j := &job{ctx: context.Background(), route: routeBatch, data: data, done: make(chan outcome, 1)}
	h.coming.Add(1)
	h.bat <- j
	return j
}

// An engine runs for as long as files keep coming: on a warm first scan,
// often the whole scan. The run must let go of each job it answered, or it
// holds every file of the scan (15 MB live at the peak of the corpus's).
func TestBatchRunLetsGoOfFinishedJobs(t *testing.T) {
	h := bareHasher(1)
	b := &batchRun{h: h}
	data := []byte("small file")
	const n = 2000
	var jobs []weak.Pointer[job]
	for i := range n {
		j := queueSmall(h, &data)
		jobs = append(jobs, weak.Make(j))
		if _, f := b.next(false); f != mbsha256.Taken {
			t.Fatalf("stream %d: next says %v; want Taken", i, f)
		}
		b.finish(i, sha256.Sum256(data), nil)
		if o := <-j.done; o.err != nil {
			t.Fatalf("stream %d: %v", i, o.err)
		}
	}
	runtime.GC()
	kept := 0
	for _, w := range jobs {
		if w.Value() != nil {
			kept++
		}
	}
	if kept > 0 {
		t.Errorf("the engine's run still holds %d of the %d jobs it answered", kept, n)
	}
	runtime.KeepAlive(b)
}

// Streams finish out of order (a large file in one lane while small ones
// pass through the others): each job gets its own digest, once, and a
// position finished twice or never taken is ignored.
func TestBatchRunOutOfOrder(t *testing.T) {
	const n = 16
	h := bareHasher(n)
	b := &batchRun{h: h}
	var jobs []*job
	var datas [n][]byte
	for i := range n {
		datas[i] = []byte{byte(i)}
		jobs = append(jobs, queueSmall(h, &datas[i]))
	}
	for i := range n {
		if _, f := b.next(false); f != mbsha256.Taken {
			t.Fatalf("stream %d: next says %v; want Taken", i, f)
		}
	}
	for _, i := range []int{5, 0, 15, 7, 5, 99, -1} {
		b.finish(i, sha256.Sum256(datas[max(0, min(i, n-1))]), nil)
	}
	b.abort(context.Canceled)
	for i, j := range jobs {
		o := <-j.done
		switch i {
		case 0, 5, 7, 15:
			if want := sha256.Sum256(datas[i]); o.err != nil || string(o.res.Digest) != string(want[:]) {
				t.Errorf("job %d: digest %x, err %v; want %x", i, o.res.Digest, o.err, want)
			}
		default:
			if o.err != context.Canceled {
				t.Errorf("job %d: err %v; want the abort's", i, o.err)
			}
		}
		select {
		case o := <-j.done:
			t.Errorf("job %d answered twice: %+v", i, o)
		default:
		}
	}
	if len(b.open) != 0 {
		t.Errorf("%d streams still in flight after abort", len(b.open))
	}
}
