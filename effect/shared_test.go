package effect_test

// What effect shares with the rest of idem: the Permanent mark and the metrics
// registry.

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/inbox"
)

// inbox, effect and idem share one PermanentError: a mark made with one package's
// Permanent is recognised by the others, even wrapped.
func TestPermanentIsShared(t *testing.T) {
	t.Parallel()
	cause := errors.New("card declined")
	for name, mark := range map[string]func(error) error{
		"idem": idem.Permanent, "inbox": inbox.Permanent, "effect": effect.Permanent,
	} {
		err := fmt.Errorf("charge: %w", mark(cause))
		if !idem.IsPermanent(err) || !inbox.IsPermanent(err) || !effect.IsPermanent(err) {
			t.Errorf("%s.Permanent not recognised by every package: %v", name, err)
		}
		var pe *effect.PermanentError
		if !errors.As(err, &pe) || !errors.Is(err, cause) || pe.Error() != "permanent: card declined" {
			t.Errorf("%s.Permanent: %v", name, err)
		}
		if mark(nil) != nil {
			t.Errorf("%s.Permanent(nil) is not nil", name)
		}
	}
	if idem.IsPermanent(cause) || idem.IsPermanent(nil) {
		t.Error("an unmarked error is permanent")
	}
}

// An effect call that returns inbox.Permanent fails the effect for good, as
// effect.Permanent does.
func TestInboxPermanentFailsEffect(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		f := e.fence(t, effect.Config{})
		_, err := f.Do(context.Background(), "o1", "charge", func(context.Context, string) ([]byte, error) {
			return nil, inbox.Permanent(errors.New("card declined"))
		})
		var fe *effect.FailedError
		if !errors.As(err, &fe) {
			t.Fatalf("inbox.Permanent from an effect call: %v, want a FailedError", err)
		}
	})
}

// Two fences on one registry share idem_effects_total instead of failing to register.
func TestFencesShareMetrics(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		reg := prometheus.NewRegistry()
		for _, key := range []string{"o1", "o2"} {
			f := e.fence(t, effect.Config{Registerer: reg})
			if _, err := f.Do(context.Background(), key, "charge", func(context.Context, string) ([]byte, error) { return []byte("ok"), nil }); err != nil {
				t.Fatal(err)
			}
		}
		called := outcomes(t, reg, "called")
		if called != 2 {
			t.Errorf("idem_effects_total{outcome=\"called\"} = %v over two fences, want 2", called)
		}
	})
}
