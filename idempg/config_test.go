package idempg_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/testsvc"
)

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		cfg   idempg.Config
		field string
	}{
		{"uppercase table", idempg.Config{Table: "Idem"}, "idempg.Config.Table"},
		{"leading digit", idempg.Config{Table: "1idem"}, "idempg.Config.Table"},
		{"injection", idempg.Config{Table: `idem"; DROP TABLE users; --`}, "idempg.Config.Table"},
		{"qualified", idempg.Config{Table: "public.idem"}, "idempg.Config.Table"},
		{"too long", idempg.Config{Table: strings.Repeat("t", 49)}, "idempg.Config.Table"},
		{"negative sweep batch", idempg.Config{SweepBatch: -1}, "idempg.Config.SweepBatch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The pool points nowhere: validation must fail before any I/O.
			_, err := idempg.New(ctxFor(t), unreachablePool(t), tc.cfg)
			var ie *idem.InputError
			if !errors.As(err, &ie) || ie.Field != tc.field || !errors.Is(err, idem.ErrInvalid) {
				t.Fatalf("New(%+v) = %v, want an *idem.InputError for %s", tc.cfg, err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) || ie.Fix == "" {
				t.Fatalf("message %q does not name %s and a fix", err, tc.field)
			}
			if _, err := idempg.NewSQL(ctxFor(t), unreachableDB(t), tc.cfg); !errors.As(err, &ie) || ie.Field != tc.field {
				t.Fatalf("NewSQL(%+v) = %v, want an *idem.InputError for %s", tc.cfg, err, tc.field)
			}
		})
	}
}

func TestConfigLongestTable(t *testing.T) {
	t.Parallel()
	table := strings.Repeat("t", 48) // + "_expires_at_idx" is exactly 63 bytes
	if _, err := idempg.New(ctxFor(t), testsvc.PostgresPool(t), idempg.Config{Table: table}); err != nil {
		t.Fatalf("48-byte table name: %v", err)
	}
}

func TestNilHandles(t *testing.T) {
	t.Parallel()
	if _, err := idempg.New(ctxFor(t), nil, idempg.Config{}); !errors.Is(err, idem.ErrInvalid) || !strings.Contains(err.Error(), "pool") {
		t.Fatalf("New(nil pool) = %v, want an input error naming pool", err)
	}
	if _, err := idempg.NewSQL(ctxFor(t), nil, idempg.Config{}); !errors.Is(err, idem.ErrInvalid) || !strings.Contains(err.Error(), "db") {
		t.Fatalf("NewSQL(nil db) = %v, want an input error naming db", err)
	}
}
