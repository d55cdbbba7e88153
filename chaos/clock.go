package chaos

import (
	"sync"
	"time"
)

// Clock is a wall clock that can be made to jump, forwards or backwards, while a
// flow runs. Give its Now to the component whose expiry it should drive (a store's
// leases and retention: idemsqlite.Config.Now, idemmem.Config.Now) and call Jump
// to move it. It is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	offset time.Duration
}

// Now returns the real time moved by every jump so far.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Jump moves the clock by d (negative: backwards) and returns the total offset.
func (c *Clock) Jump(d time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
	return c.offset
}

// Offset is how far the clock is from real time.
func (c *Clock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}
