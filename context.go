package idem

import (
	"context"
	"sync"
)

// lineageKey is the context key of WithKey and WithKeyFunc.
type lineageKey struct{}

// lineage is a key lineage, computed at most once and only if someone asks.
type lineage struct {
	once sync.Once
	f    func() string
	key  string
}

// WithKey returns a context carrying key as the idempotency key lineage of the
// operation being run: the parent from which its outbound calls derive their own
// keys (idemhttp.Transport sends idemkey.Derive(key, method+" "+host+path)). The
// idemhttp middleware sets it for handlers from the request's Idempotency-Key,
// the inbox for handlers from the message's key, and effect.Fence for calls from
// the effect's derived key, so one logical operation keeps one key lineage from
// the first inbound request to the last downstream call.
func WithKey(ctx context.Context, key string) context.Context {
	l := &lineage{key: key}
	l.once.Do(func() {})
	return context.WithValue(ctx, lineageKey{}, l)
}

// WithKeyFunc is WithKey with a lineage computed by f on the first KeyFrom, and
// never if nobody asks: for code that sets a lineage on every request or message
// (the middleware, the inbox), where most handlers make no outbound call.
func WithKeyFunc(ctx context.Context, f func() string) context.Context {
	return context.WithValue(ctx, lineageKey{}, &lineage{f: f})
}

// KeyFrom returns the key lineage WithKey or WithKeyFunc put in ctx, if any (an
// empty key is none).
func KeyFrom(ctx context.Context) (string, bool) {
	l, _ := ctx.Value(lineageKey{}).(*lineage)
	if l == nil {
		return "", false
	}
	l.once.Do(func() { l.key = l.f() })
	return l.key, l.key != ""
}
