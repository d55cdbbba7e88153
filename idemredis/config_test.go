package idemredis_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/redis/go-redis/v9"
)

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) // never dialled
	t.Cleanup(func() { client.Close() })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:0"}})
	t.Cleanup(func() { ring.Close() })
	cases := []struct {
		name   string
		client redis.UniversalClient
		cfg    idemredis.Config
		field  string
	}{
		{"nil client", nil, idemredis.Config{}, "client"},
		{"hash tag in prefix", client, idemredis.Config{Prefix: "{idem}:"}, "Config.Prefix"},
		{"long prefix", client, idemredis.Config{Prefix: strings.Repeat("p", 256)}, "Config.Prefix"},
		{"space in prefix", client, idemredis.Config{Prefix: "my idem:"}, "Config.Prefix"},
		{"control char in prefix", client, idemredis.Config{Prefix: "idem\n"}, "Config.Prefix"},
		{"bad utf8 prefix", client, idemredis.Config{Prefix: "idem\xff:"}, "Config.Prefix"},
		{"negative WaitReplicas", client, idemredis.Config{WaitReplicas: -1}, "Config.WaitReplicas"},
		{"huge WaitReplicas", client, idemredis.Config{WaitReplicas: 1000}, "Config.WaitReplicas"},
		{"negative WaitTimeout", client, idemredis.Config{WaitReplicas: 1, WaitTimeout: -time.Second}, "Config.WaitTimeout"},
		{"sub-ms WaitTimeout", client, idemredis.Config{WaitReplicas: 1, WaitTimeout: time.Microsecond}, "Config.WaitTimeout"},
		{"hour WaitTimeout", client, idemredis.Config{WaitReplicas: 1, WaitTimeout: time.Hour}, "Config.WaitTimeout"},
		{"WAIT on a Ring", ring, idemredis.Config{WaitReplicas: 1}, "Config.WaitReplicas"},
	}
	for _, tc := range cases {
		_, err := idemredis.New(tc.client, tc.cfg)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field || ie.Fix == "" || !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("%s: New = %v, want an *idem.InputError naming %s with a fix", tc.name, err, tc.field)
		}
	}
	s, err := idemredis.New(client, idemredis.Config{})
	if err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	if got := s.Key(idem.Key{Scope: "a", ID: "b"}); !strings.HasPrefix(got, idemredis.DefaultPrefix) {
		t.Fatalf("zero Config key %q does not start with the default prefix %q", got, idemredis.DefaultPrefix)
	}
}
