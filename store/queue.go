package store

import "sync"

// queueChunk is how many changes one chunk of the writer's queue holds
// (about 100 KB).
const queueChunk = 256

// queue is the writer's intake: changes in the order they were submitted,
// at most max of them. It keeps them in chunks allocated as it fills and
// let go of as the writer empties them, one kept spare, and release lets
// go of the rest once the writer rests. A channel of 4×MaxBatch changes
// held 6.4 MB from open to close, idle too; a scan fills the queue only
// while the writer commits.
//
// A full queue makes push wait until the writer has taken half of it
// (back-pressure), so a waiting submitter is not woken for each change.
type queue struct {
	ready chan struct{} // holds a token while changes may wait (cap 1)

	mu         sync.Mutex
	head, tail *qchunk // taken from head, put at tail; nil when released
	spare      *qchunk // an emptied chunk kept for the next
	n, max     int
	room       chan struct{} // closed when a full queue is half empty again
}

// qchunk is a piece of the queue: items[lo:hi] wait.
type qchunk struct {
	items  [queueChunk]item
	lo, hi int
	next   *qchunk
}

func newQueue(max int) *queue {
	return &queue{ready: make(chan struct{}, 1), max: max}
}

// push appends it, waiting while the queue is full; false when closing
// ended the wait first (it was not queued).
func (q *queue) push(it item, closing <-chan struct{}) bool {
	q.mu.Lock()
	for q.n >= q.max {
		if q.room == nil {
			q.room = make(chan struct{})
		}
		room := q.room
		q.mu.Unlock()
		select {
		case <-room:
		case <-closing:
			return false
		}
		q.mu.Lock()
	}
	if q.tail == nil || q.tail.hi == queueChunk {
		c := q.spare
		if c == nil {
			c = new(qchunk)
		}
		q.spare = nil
		if q.tail == nil {
			q.head = c
		} else {
			q.tail.next = c
		}
		q.tail = c
	}
	q.tail.items[q.tail.hi] = it
	q.tail.hi++
	q.n++
	q.mu.Unlock()
	q.signal()
	return true
}

// pop takes the oldest change; false when none waits.
func (q *queue) pop() (item, bool) {
	q.mu.Lock()
	if q.n == 0 {
		q.mu.Unlock()
		return item{}, false
	}
	c := q.head
	it := c.items[c.lo]
	c.items[c.lo] = item{} // the queue no longer holds it
	c.lo++
	q.n--
	if c.lo == c.hi {
		q.head = c.next
		if q.head == nil {
			q.tail = nil
		}
		if q.spare == nil {
			c.lo, c.hi, c.next = 0, 0, nil
			q.spare = c
		}
	}
	if q.room != nil && q.n <= q.max/2 {
		close(q.room)
		q.room = nil
	}
	more := q.n > 0
	q.mu.Unlock()
	if more {
		q.signal()
	}
	return it, true
}

// signal leaves a token in ready unless one is there.
func (q *queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// len is how many changes wait.
func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// release lets go of the spare chunk, and of the last one when empty.
func (q *queue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.spare = nil
	if q.n == 0 {
		q.head, q.tail = nil, nil
	}
}

// chunks is how many chunks the queue holds, the spare included, for tests.
func (q *queue) chunks() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for c := q.head; c != nil; c = c.next {
		n++
	}
	if q.spare != nil {
		n++
	}
	return n
}
