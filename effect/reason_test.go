package effect_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemhq/idem/effect"
)

// A call failing permanently with a long error text holding NUL bytes and invalid
// UTF-8 (which PostgreSQL refuses in text, MariaDB in its utf8mb4 columns, and
// which overflows MariaDB's TEXT) is recorded as failed, its reason cut to fit.
func TestFailedReasonFits(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		f := e.fence(t, effect.Config{})
		loud := strings.Repeat("\x00\xff declined ", 7000)
		_, err := f.Do(ctx, "o1", "charge", func(context.Context, string) ([]byte, error) {
			return nil, effect.Permanent(errors.New(loud))
		})
		var fe *effect.FailedError
		if !errors.As(err, &fe) {
			t.Fatalf("Do = %v, want a FailedError", err)
		}
		got, ok, err := f.Get(ctx, "o1", "charge")
		if err != nil || !ok || got.State != effect.StateFailed || got.Reason != fe.Reason || len(got.Reason) > effect.MaxReasonLen ||
			!utf8.ValidString(got.Reason) || !strings.HasPrefix(got.Reason, "permanent: \uFFFD\uFFFD declined") {
			t.Fatalf("Get = %q %d bytes, %v, %v; want it failed, its reason cut to %d bytes", got.State, len(got.Reason), ok, err, effect.MaxReasonLen)
		}
	})
}
