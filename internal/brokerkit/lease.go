package brokerkit

import (
	"context"
	"sync"
	"time"

	"github.com/idemhq/idem/internal/wait"
)

// Keeper is the lease keeper of a source whose broker hides a delivery for a while
// (Pub/Sub's ack deadline, SQS's visibility timeout, JetStream's AckWait, the idle
// time after which Redis Streams lets a group reclaim an entry) and hands it to
// another consumer once that passes. While a delivery is unsettled, Run extends its
// deadline to Lease from now shortly before it passes, so a slow handler does not
// see its message redelivered; no extension reaches past MaxExtension after the
// delivery was received, and then the keeper lets go (the broker redelivers, and
// the inbox's dedup makes that harmless). K identifies a delivery (an ack ID, a
// settler). Set the exported fields before Run; the methods are safe for
// concurrent use.
type Keeper[K comparable] struct {
	// Every is how often Run looks at the leases.
	Every time.Duration
	// Margin: a look extends each lease whose deadline is less than Margin away.
	// Two periods of Every extend just in time; Lease extends at every look.
	Margin time.Duration
	// Lease is the deadline one extension sets, from now.
	Lease time.Duration
	// MaxExtension bounds every deadline to received + MaxExtension.
	MaxExtension time.Duration
	// Extend asks the broker to set the deadline of keys to Lease from now. It
	// returns the keys to let go of, with why (an extension refused for good);
	// keys it does not return stay and are tried again at the next look.
	Extend func(ctx context.Context, keys []K) map[K]error
	// LetGo, if set, is told of each lease the keeper let go while it runs: at
	// MaxExtension (err nil) or refused by Extend.
	LetGo func(k K, err error)

	mu     sync.Mutex
	leases map[K]*lease
	paused int // Pause calls not yet resumed: looks extend nothing
}

// lease is one unsettled delivery's deadline at the broker.
type lease struct {
	received time.Time
	expires  time.Time // as last set
}

// Add starts keeping k, received at received, whose deadline at the broker is
// expires.
func (kp *Keeper[K]) Add(k K, received, expires time.Time) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if kp.leases == nil {
		kp.leases = make(map[K]*lease)
	}
	kp.leases[k] = &lease{received: received, expires: expires}
}

// Remove stops keeping k (settled, or given back); it reports whether k was kept.
func (kp *Keeper[K]) Remove(k K) bool {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	_, ok := kp.leases[k]
	delete(kp.leases, k)
	return ok
}

// Len is how many deliveries the keeper holds.
func (kp *Keeper[K]) Len() int {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	return len(kp.leases)
}

// Drain stops keeping every delivery and returns them.
func (kp *Keeper[K]) Drain() []K {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	keys := make([]K, 0, len(kp.leases))
	for k := range kp.leases {
		keys = append(keys, k)
	}
	clear(kp.leases)
	return keys
}

// Pause stops the extensions until resume is called, as a paused process stops
// them: past their deadlines the broker hands the deliveries to another consumer.
// It is for fault injection (the sources' PauseRenewals). resume may be called
// more than once; the extensions start again at the next look.
func (kp *Keeper[K]) Pause() (resume func()) {
	kp.mu.Lock()
	kp.paused++
	kp.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			kp.mu.Lock()
			kp.paused--
			kp.mu.Unlock()
		})
	}
}

// Run extends the leases every Every until ctx ends.
func (kp *Keeper[K]) Run(ctx context.Context) {
	wait.Every(ctx, kp.Every, func() { kp.look(ctx) })
}

// look extends what is due and lets go of what reached MaxExtension.
func (kp *Keeper[K]) look(ctx context.Context) {
	now := time.Now()
	var due, done []K
	kp.mu.Lock()
	if kp.paused > 0 {
		kp.mu.Unlock()
		return
	}
	for k, l := range kp.leases {
		switch {
		case now.Add(kp.Lease).Sub(l.received) > kp.MaxExtension:
			delete(kp.leases, k)
			done = append(done, k)
		case l.expires.Sub(now) < kp.Margin:
			due = append(due, k)
			l.expires = now.Add(kp.Lease)
		}
	}
	kp.mu.Unlock()
	for _, k := range done {
		kp.letGo(k, nil)
	}
	if len(due) == 0 {
		return
	}
	for k, err := range kp.Extend(ctx, due) {
		kp.Remove(k)
		if ctx.Err() == nil {
			kp.letGo(k, err)
		}
	}
}

func (kp *Keeper[K]) letGo(k K, err error) {
	if kp.LetGo != nil {
		kp.LetGo(k, err)
	}
}
