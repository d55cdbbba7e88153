package verify

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// TestProgressWriter: on a terminal the progress is one line rewritten in place
// (\r), at most every progressEvery, erased by Clear; elsewhere it is plain lines
// without \r or escape sequences, at most every plainEvery.
func TestProgressWriter(t *testing.T) {
	t.Parallel()
	p := Progress{Placed: 40, Applied: 20, Paid: 10, Orders: 80, Faults: 7}
	for _, c := range []struct {
		terminal bool
		steps    []time.Duration // clock advance before each update
		lines    int             // lines written
	}{
		// Terminal: the first update draws; then at most one line per 250 ms.
		{true, []time.Duration{0, 100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond, time.Second}, 3},
		// Elsewhere: nothing for the first 10 s (short runs stay quiet), then one line per 10 s.
		{false, []time.Duration{0, 5 * time.Second, 5 * time.Second, time.Second, 8 * time.Second, 30 * time.Second}, 2},
	} {
		clock := &fakeClock{t: time.Unix(1000, 0)}
		var out bytes.Buffer
		w := NewProgressWriter(&out, c.terminal, clock.now)
		for _, d := range c.steps {
			clock.t = clock.t.Add(d)
			w.Update(p)
		}
		w.Clear()
		got := out.String()
		if c.terminal {
			if n := strings.Count(got, "\r["); n != c.lines || strings.Contains(got, "\n") {
				t.Errorf("terminal: %d in-place lines (want %d), no newline: %q", n, c.lines, got)
			}
			if !strings.HasSuffix(got, "\r\033[K") || !strings.Contains(got, "placed 40/80 · applied 20 · paid 10 · faults 7 · placing") {
				t.Errorf("terminal: want the counts and a final erase: %q", got)
			}
			continue
		}
		if strings.ContainsAny(got, "\r\033") || strings.Count(got, "\n") != c.lines {
			t.Errorf("not a terminal: want %d plain lines, no \\r or escapes: %q", c.lines, got)
		}
		if !strings.Contains(got, "idem verify: placed 40/80, applied 20, paid 10, faults 7, placing\n") {
			t.Errorf("not a terminal: the line lacks the counts: %q", got)
		}
	}
}
