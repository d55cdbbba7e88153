package idemnats

import (
	"context"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
	"github.com/nats-io/nats.go/jetstream"
)

// EnsureStream creates the stream cfg describes, or updates an existing stream of
// that name to it, so a service can declare the stream it relies on at start-up
// without a separate provisioning step. The stream keeps messages after they are
// acknowledged (limits retention): consumers of other groups, and replays, still
// see them. Changing the storage of an existing stream fails: NATS cannot convert
// it in place.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (jetstream.Stream, error) {
	cfg, err := brokerkit.Setup(js == nil, "js", "pass jetstream.New(nc)", cfg, StreamConfig.withDefaults)
	if err != nil {
		return nil, err
	}
	sc := jetstream.StreamConfig{
		Name:       cfg.Name,
		Subjects:   cfg.Subjects,
		Duplicates: cfg.Duplicates,
		Storage:    cfg.Storage,
		Replicas:   cfg.Replicas,
		MaxAge:     cfg.MaxAge,
		MaxMsgs:    cfg.MaxMsgs,
		MaxBytes:   cfg.MaxBytes,
		Retention:  jetstream.LimitsPolicy,
		Discard:    jetstream.DiscardOld,
	}
	if cfg.MaxMsgs == 0 {
		sc.MaxMsgs = -1
	}
	if cfg.MaxBytes == 0 {
		sc.MaxBytes = -1
	}
	if cfg.Dedup == DedupForever {
		sc.Discard, sc.DiscardNewPerSubject, sc.MaxMsgsPerSubject = jetstream.DiscardNew, true, 1
	}
	var st jetstream.Stream
	err = retryTransient(ctx, js.Options().DefaultTimeout, func(ctx context.Context) error {
		var err error
		st, err = js.CreateOrUpdateStream(ctx, sc)
		return err
	})
	if err != nil {
		return nil, &idem.BackendError{Backend: backend, Op: "ensure stream", Err: fmt.Errorf("stream %q on %v: %w", cfg.Name, cfg.Subjects, err)}
	}
	return st, nil
}
