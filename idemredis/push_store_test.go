package idemredis_test

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/stream"
	"github.com/idemhq/idem/stream/streamtest"
)

// The stream.Store contract, on Redis.
func TestPushStoreSuite(t *testing.T) {
	t.Parallel()
	streamtest.StoreSuite(t, streamtest.Harness{New: func(t *testing.T, cfg streamtest.Config) stream.Store {
		c := redis.NewClient(&redis.Options{Addr: testsvc.RedisAddr()})
		t.Cleanup(func() { c.Close() })
		s, err := idemredis.NewPushStore(c, idemredis.PushStoreConfig{Prefix: testsvc.RedisPrefix(t), Now: cfg.Now, MaxClients: cfg.MaxClients})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}})
}

// A bad configuration names the field.
func TestPushStoreConfigErrors(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: testsvc.ClosedAddr(t)})
	t.Cleanup(func() { c.Close() })
	for _, tc := range []struct {
		client redis.UniversalClient
		cfg    idemredis.PushStoreConfig
		field  string
	}{
		{nil, idemredis.PushStoreConfig{}, "client"},
		{c, idemredis.PushStoreConfig{Prefix: "a{b}"}, "Config.Prefix"},
		{c, idemredis.PushStoreConfig{MaxClients: -1}, "MaxClients"},
	} {
		_, err := idemredis.NewPushStore(tc.client, tc.cfg)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("NewPushStore(%+v) = %v, want an InputError on %s", tc.cfg, err, tc.field)
		}
	}
}
