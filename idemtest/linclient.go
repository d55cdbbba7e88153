package idemtest

import (
	"math/rand/v2"
	"sync/atomic"

	"github.com/idemhq/idem"
)

// linClient chooses one goroutine's calls. Most use a token the client acquired
// itself. Some use a token it held before (a stale holder, which the store must
// fence), and some the token any client last acquired for the key: a second
// worker acting on the live lease, as a retried request or a cancellation racing
// the handler does. Those make two calls with the live token meet (a Release and a
// Complete of one token, say), which one holder calling in turn never does.
type linClient struct {
	rng   *rand.Rand
	board []atomic.Uint64 // key → the token last acquired for it, shared by the clients
	held  map[int]uint64  // key → the token this client last acquired
	stale []uint64
}

// next chooses a call on one of keys keys from first on.
func (c *linClient) next(first, keys int, renew bool, result string) linInput {
	k := first + c.rng.IntN(keys)
	tok, holds := c.held[k]
	switch p := c.rng.IntN(8); {
	case holds && p > 0:
	case p < 4 && c.board[k].Load() != 0:
		tok = c.board[k].Load()
	case p < 5 && len(c.stale) > 0:
		tok = c.stale[c.rng.IntN(len(c.stale))]
	default:
		return linInput{Op: linClaim, Key: k}
	}
	switch p := c.rng.IntN(10); {
	case p < 4 && renew:
		return linInput{Op: linRenew, Key: k, Token: tok}
	case p < 7:
		return linInput{Op: linRelease, Key: k, Token: tok}
	case p < 8:
		return linInput{Op: linComplete, Key: k, Token: tok, Result: result}
	}
	return linInput{Op: linClaim, Key: k}
}

// observe notes what a call did to the client's tokens, and publishes an acquired
// token to the other clients.
func (c *linClient) observe(in linInput, out linOutput) {
	if in.Op == linClaim && out.Outcome == idem.Acquired {
		if old, ok := c.held[in.Key]; ok {
			c.stale = append(c.stale, old)
		}
		c.held[in.Key] = out.Token
		c.board[in.Key].Store(out.Token)
		return
	}
	if in.Op != linClaim && in.Token == c.held[in.Key] && (in.Op != linRenew || out.Err != linOK) {
		// Released, completed or lost: this client's token for the key is spent.
		c.stale = append(c.stale, in.Token)
		delete(c.held, in.Key)
	}
}
