package audit_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/audit"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/outbox"
)

// wantInputError fails t unless err is an *idem.InputError naming field, with a
// reason and a fix.
func wantInputError(t *testing.T, what string, err error, field string) {
	t.Helper()
	var ie *idem.InputError
	if !errors.As(err, &ie) {
		t.Errorf("%s: got %v, want an *idem.InputError on %s", what, err, field)
		return
	}
	if ie.Field != field || ie.Reason == "" || ie.Fix == "" {
		t.Errorf("%s: got %+v, want field %s with a reason and a fix", what, ie, field)
	}
}

func TestConsumersInRefuses(t *testing.T) {
	t.Parallel()
	db := openDB(t, "sqlite")
	ok := audit.Consumer{Name: "ledger", Topics: []string{"orders"}}
	for _, tc := range []struct {
		what      string
		consumers []audit.Consumer
		field     string
	}{
		{"no consumer", nil, "audit.ConsumersIn consumers"},
		{"no name", []audit.Consumer{{Topics: []string{"orders"}}}, "audit.Consumer[0].Name"},
		{"a name twice", []audit.Consumer{ok, ok}, "audit.Consumer[1].Name"},
		{"no topic", []audit.Consumer{{Name: "ledger"}}, "audit.Consumer[0].Topics"},
		{"an empty topic", []audit.Consumer{{Name: "ledger", Topics: []string{"orders", ""}}}, "audit.Consumer[0].Topics"},
		{"a bad table", []audit.Consumer{ok, {Name: "mail", Topics: []string{"orders"}, Table: "records; DROP TABLE x"}}, "audit.Consumer[1].Table"},
		{"a negative retention", []audit.Consumer{{Name: "ledger", Topics: []string{"orders"}, Retention: -time.Hour}}, "audit.Consumer[0].Retention"},
	} {
		_, err := audit.ConsumersIn(db.tx, tc.consumers...)
		wantInputError(t, tc.what, err, tc.field)
	}
	if _, err := audit.ConsumersIn(idemsql.TxDB[*sql.Tx]{}, ok); err == nil {
		t.Error("ConsumersIn took a TxDB without a driver")
	}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	prod, cons := openDB(t, "sqlite"), openDB(t, "sqlite")
	side := func(cs ...audit.Consumer) *audit.Side {
		t.Helper()
		s, err := audit.ConsumersIn(cons.tx, cs...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ledger := side(audit.Consumer{Name: "ledger", Topics: []string{"orders"}})
	for _, tc := range []struct {
		what  string
		cfg   audit.Config
		sides []*audit.Side
		field string
	}{
		{"no side", audit.Config{}, nil, "audit.New sides"},
		{"a nil side", audit.Config{}, []*audit.Side{ledger, nil}, "audit.New sides"},
		{"a consumer in two sides", audit.Config{}, []*audit.Side{ledger, side(audit.Consumer{Name: "ledger", Topics: []string{"refunds"}})}, "audit.New sides"},
		{"a window longer than half the retention", audit.Config{Window: 2 * time.Hour},
			[]*audit.Side{side(audit.Consumer{Name: "ledger", Topics: []string{"orders"}, Retention: 3 * time.Hour})}, "audit.Config.Window"},
		{"the default window and a 1h retention", audit.Config{},
			[]*audit.Side{side(audit.Consumer{Name: "ledger", Topics: []string{"orders"}, Retention: time.Hour})}, "audit.Config.Window"},
		{"a negative window", audit.Config{Window: -time.Minute}, []*audit.Side{ledger}, "audit.Config.Window"},
		{"a grace as long as the window", audit.Config{Window: time.Minute, Grace: time.Minute}, []*audit.Side{ledger}, "audit.Config.Grace"},
		{"a negative grace", audit.Config{Grace: -time.Second}, []*audit.Side{ledger}, "audit.Config.Grace"},
		{"a page too large", audit.Config{PageSize: audit.MaxPageSize + 1}, []*audit.Side{ledger}, "audit.Config.PageSize"},
		{"a negative page", audit.Config{PageSize: -1}, []*audit.Side{ledger}, "audit.Config.PageSize"},
		{"negative MaxRepairs", audit.Config{MaxRepairs: -1}, []*audit.Side{ledger}, "audit.Config.MaxRepairs"},
		{"negative MaxRepairsPerMessage", audit.Config{MaxRepairsPerMessage: -1}, []*audit.Side{ledger}, "audit.Config.MaxRepairs"},
	} {
		_, err := audit.New(prod.tx, tc.cfg, tc.sides...)
		wantInputError(t, tc.what, err, tc.field)
	}
	// A window of exactly half the retention is allowed.
	a, err := audit.New(prod.tx, audit.Config{Window: time.Hour, Grace: time.Minute},
		side(audit.Consumer{Name: "ledger", Topics: []string{"orders"}, Retention: 2 * time.Hour}))
	if err != nil {
		t.Fatalf("a window of half the retention: %v", err)
	}
	_, err = a.Repairs(ctx, 0, 0)
	wantInputError(t, "Repairs with limit 0", err, "audit.Auditor.Repairs limit")
	err = a.Loop(ctx, 0, nil)
	wantInputError(t, "Loop with interval 0", err, "audit.Auditor.Loop interval")
	if _, err := audit.New(idemsql.TxDB[*sql.Tx]{}, audit.Config{}, ledger); err == nil {
		t.Error("New took a producer TxDB without a driver")
	}
}

// TestBlindBeforeItRuns: a consumer that holds no key yet is blind, named with
// why, and the run says nothing else of its messages.
func TestBlindBeforeItRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	prod, cons := openDB(t, "sqlite"), openDB(t, "sqlite")
	if _, err := outbox.New(ctx, prod.tx, outbox.Config{}); err != nil {
		t.Fatal(err)
	}
	s, err := audit.ConsumersIn(cons.tx, audit.Consumer{Name: "ledger", Topics: []string{"orders"}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := audit.New(prod.tx, audit.Config{Logger: quiet}, s)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := a.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Blind) != 1 || rep.Blind[0].Consumer != "ledger" || !strings.Contains(rep.Blind[0].Reason, "holds no key") {
		t.Errorf("Blind = %+v, want ledger, holding no key", rep.Blind)
	}
}
