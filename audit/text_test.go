package audit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/audit"
)

// The sentence claims the guarantee only for consumers the audit could see: a
// blind one's row says what was published and that nothing more is known.
func TestSentenceOfABlindConsumer(t *testing.T) {
	now := time.Now()
	rep := &audit.Report{From: now.Add(-time.Hour), To: now,
		Rows: []audit.Row{
			{Topic: "orders", Consumer: "ledger", Published: 10, Applied: 9, Missing: 1,
				Deliveries: &audit.Delivered{Processed: 9, Duplicates: 3}},
			{Topic: "orders", Consumer: "mailer", Published: 10},
		},
		Blind: []audit.Blind{{Consumer: "mailer", Reason: "holds no key"}},
	}
	lines := strings.Split(strings.TrimSpace(rep.Sentence()), "\n")
	if len(lines) != 3 {
		t.Fatalf("sentence:\n%s\nwant 3 lines: ledger's, mailer's, mailer's blindness", rep.Sentence())
	}
	for _, want := range []string{"orders → ledger", "10 published, 9 applied once, 0 dead-lettered, 1 missing", "3 duplicate deliveries suppressed (25.00%", "0 duplicate effects possible"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("ledger's sentence %q lacks %q", lines[0], want)
		}
	}
	if !strings.Contains(lines[1], "orders → mailer: 10 published") || strings.Contains(lines[1], "duplicate effects") || strings.Contains(lines[1], "applied") {
		t.Errorf("the blind consumer's sentence %q claims what the audit cannot see", lines[1])
	}
	if !strings.Contains(lines[2], "mailer: not audited: holds no key") {
		t.Errorf("last line %q, want why mailer is not audited", lines[2])
	}
}
