package chaos

import "sync"

// queue is an unbounded FIFO of message indexes standing in for a broker: pop blocks
// until a message is available or every delivered message has been settled.
type queue struct {
	mu      sync.Mutex
	cond    *sync.Cond
	items   []int
	pending int // pushed and not yet settled with done
	closed  bool
}

func newQueue() *queue {
	q := &queue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *queue) push(i int) {
	q.mu.Lock()
	q.items = append(q.items, i)
	q.pending++
	q.mu.Unlock()
	q.cond.Signal()
}

// pop returns the next message, or false once nothing is pending or the queue closed.
func (q *queue) pop() (int, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && q.pending > 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 || q.closed {
		return 0, false
	}
	i := q.items[0]
	q.items = q.items[1:]
	return i, true
}

// done settles one popped delivery; when nothing is pending every consumer wakes and stops.
func (q *queue) done() {
	q.mu.Lock()
	q.pending--
	if q.pending == 0 {
		q.cond.Broadcast()
	}
	q.mu.Unlock()
}

func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}
