package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/idemhq/idem/cmd/idem/internal/verify"
)

// events records the writes to stdout and stderr in the order they happen.
type events struct {
	mu  sync.Mutex
	log []string // "out:" or "err:" and the text
}

type eventWriter struct {
	e      *events
	stream string
}

func (w eventWriter) Write(p []byte) (int, error) {
	w.e.mu.Lock()
	defer w.e.mu.Unlock()
	w.e.log = append(w.e.log, w.stream+string(p))
	return len(p), nil
}

// TestVerifyHeaderFirst: idem verify writes its header before the flow runs (the
// progress lines follow it), and the result table after; the terminal decision is
// Main's (forced here), and the progress line goes to stderr.
func TestVerifyHeaderFirst(t *testing.T) {
	t.Parallel()
	e := &events{}
	m := NewMain(eventWriter{e, "out:"}, eventWriter{e, "err:"})
	var asked io.Writer
	m.terminal = func(w io.Writer) bool { asked = w; return true }
	err := m.Run(context.Background(), []string{"verify", "--ops", "40", "--seed", "3", "--db", "sqlite:", "--broker", "nats:"})
	if err != nil {
		t.Fatalf("verify: %v\n%s", err, strings.Join(e.log, ""))
	}
	if _, ok := asked.(eventWriter); !ok {
		t.Errorf("the terminal was asked of %T, want stderr as given to Main (not Run's redacting wrapper)", asked)
	}
	header, progress, table := -1, -1, -1
	for i, ev := range e.log {
		switch {
		case header < 0 && strings.HasPrefix(ev, "out:idem verify: 40 orders, sqlite"):
			header = i
		case progress < 0 && strings.HasPrefix(ev, "err:\r[") && strings.Contains(ev, "placed "):
			progress = i
		case table < 0 && strings.HasPrefix(ev, "out:") && strings.Contains(ev, "dup suppressed"):
			table = i
		}
	}
	if header != 0 || progress < header || table < progress {
		t.Fatalf("want the header first (at %d), then progress (at %d), then the table (at %d):\n%q", header, progress, table, e.log)
	}
	if n := strings.Count(strings.Join(e.log, ""), "idem verify: 40 orders"); n != 1 {
		t.Errorf("the header was written %d times", n)
	}
}

// TestVerifyHelpListsColumns: verify --help explains every column header, row and
// fault the table prints; both come from the same constants (verify.Columns,
// verify.Boundaries, verify.Faults), and the table's header line is exactly
// Columns.
func TestVerifyHelpListsColumns(t *testing.T) {
	t.Parallel()
	_, help, err := run(t, "verify", "--help")
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("verify --help: %v", err)
	}
	var table bytes.Buffer
	r := &verify.Report{Rows: []verify.Row{{Boundary: verify.BoundaryHTTP}}}
	if err := r.WriteResults(&table); err != nil {
		t.Fatal(err)
	}
	var headers []string
	for _, c := range verify.Columns {
		headers = append(headers, c.Header)
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(c.Header) + `  `).MatchString(help) {
			t.Errorf("verify --help does not explain the column %q", c.Header)
		}
	}
	if want := strings.Join(headers, "  "); !strings.Contains(collapse(table.String()), want) {
		t.Errorf("the table's header line is not the columns %q:\n%s", want, table.String())
	}
	for _, b := range append(verify.Boundaries, verify.Faults...) {
		if !strings.Contains(help, "\n  "+b.Name+" ") {
			t.Errorf("verify --help does not explain %q", b.Name)
		}
	}
	for _, want := range []string{verify.BoundaryRelay, verify.BoundaryPayment, verify.BoundaryPush, "consumer_killed_before_commit", "dup suppressed"} {
		if !strings.Contains(help, want) {
			t.Errorf("verify --help lacks %q", want)
		}
	}
}

// collapse turns the runs of spaces tabwriter aligns with into two spaces.
func collapse(s string) string { return regexp.MustCompile(` {2,}`).ReplaceAllString(s, "  ") }
