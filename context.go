package idem

import "context"

// lineageKey is the context key of WithKey.
type lineageKey struct{}

// WithKey returns a context carrying key as the idempotency key lineage of the
// operation being run: the parent from which its outbound calls derive their own
// keys (idemhttp.Transport sends idemkey.Derive(key, method+" "+host+path)). The
// idemhttp middleware sets it for handlers from the request's Idempotency-Key,
// the inbox for handlers from the message's key, and effect.Fence for calls from
// the effect's derived key, so one logical operation keeps one key lineage from
// the first inbound request to the last downstream call.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, lineageKey{}, key)
}

// KeyFrom returns the key lineage WithKey put in ctx, if any (an empty key is none).
func KeyFrom(ctx context.Context) (string, bool) {
	k, _ := ctx.Value(lineageKey{}).(string)
	return k, k != ""
}
