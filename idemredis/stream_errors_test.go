package idemredis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/redis/go-redis/v9"
)

func TestStreamUnreachable(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: testsvc.ClosedAddr(t), DialTimeout: 200 * time.Millisecond, MaxRetries: 1})
	t.Cleanup(func() { client.Close() })
	sink, err := idemredis.NewStreamSink(client, idemredis.StreamSinkConfig{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := idemredis.NewStreamSource(client, idemredis.StreamSourceConfig{Stream: "s", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx := ctxFor(t)
	msg := idem.Message{ID: "m", Topic: "s"}
	for op, err := range map[string]error{
		"publish":   sink.Publish(ctx, msg),
		"publish 2": sink.Publish(ctx, msg, msg),
		"receive":   func() error { _, err := src.Receive(ctx, 1); return err }(),
	} {
		var be *idem.BackendError
		if !errors.As(err, &be) || be.Backend != "redis" || !strings.HasPrefix(op, be.Op) || !idem.IsRetryable(err) {
			t.Errorf("%s on a closed port = %v, want a retryable *idem.BackendError for redis %s", op, err, op)
		}
	}
}

func TestStreamConfigValidation(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: testsvc.RedisAddr()})
	t.Cleanup(func() { client.Close() })
	ok := idemredis.StreamSourceConfig{Stream: "s", Group: "g"}
	with := func(f func(*idemredis.StreamSourceConfig)) idemredis.StreamSourceConfig { c := ok; f(&c); return c }
	tests := []struct {
		field string
		err   error
	}{
		{"client", func() error { _, err := idemredis.NewStreamSource(nil, ok); return err }()},
		{"client", func() error { _, err := idemredis.NewStreamSink(nil, idemredis.StreamSinkConfig{}); return err }()},
		{"StreamSinkConfig.MaxLen", func() error {
			_, err := idemredis.NewStreamSink(client, idemredis.StreamSinkConfig{MaxLen: -1})
			return err
		}()},
		{"StreamSinkConfig.Dedup", func() error {
			_, err := idemredis.NewStreamSink(client, idemredis.StreamSinkConfig{Dedup: -time.Second})
			return err
		}()},
		{"StreamSinkConfig.Dedup", func() error {
			_, err := idemredis.NewStreamSink(client, idemredis.StreamSinkConfig{Dedup: idemredis.MaxDedup + time.Second})
			return err
		}()},
		{"StreamSinkConfig.Dedup", func() error {
			_, err := idemredis.NewStreamSink(client, idemredis.StreamSinkConfig{Dedup: time.Microsecond})
			return err
		}()},
		{"StreamSourceConfig.Stream", newSourceErr(client, with(func(c *idemredis.StreamSourceConfig) { c.Stream = "" }))},
		{"StreamSourceConfig.Group", newSourceErr(client, with(func(c *idemredis.StreamSourceConfig) { c.Group = "" }))},
		{"StreamSourceConfig.MinIdle", newSourceErr(client, with(func(c *idemredis.StreamSourceConfig) { c.MinIdle = -time.Second }))},
		{"StreamSourceConfig.MaxExtension", newSourceErr(client, with(func(c *idemredis.StreamSourceConfig) { c.MaxExtension = -time.Second }))},
		{"StreamSourceConfig.Block", newSourceErr(client, with(func(c *idemredis.StreamSourceConfig) { c.Block = time.Microsecond }))},
		{"max", func() error {
			src, err := idemredis.NewStreamSource(client, ok)
			if err != nil {
				return err
			}
			_, err = src.Receive(context.Background(), 0)
			return err
		}()},
	}
	for _, tt := range tests {
		var ie *idem.InputError
		if !errors.As(tt.err, &ie) || ie.Field != tt.field || !errors.Is(tt.err, idem.ErrInvalid) {
			t.Errorf("bad %s: error %v, want an *idem.InputError naming it", tt.field, tt.err)
		}
	}
	src, err := idemredis.NewStreamSource(client, ok)
	if err != nil {
		t.Fatal(err)
	}
	if src.Consumer() == "" {
		t.Error("no default consumer name")
	}
}

func newSourceErr(client redis.UniversalClient, cfg idemredis.StreamSourceConfig) error {
	_, err := idemredis.NewStreamSource(client, cfg)
	return err
}
