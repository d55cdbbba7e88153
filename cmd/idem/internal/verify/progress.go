package verify

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// verify's progress goes to stderr: stdout carries the report, which is
// redirected to a file or piped into jq (--json) as often as it is read, and a
// status line has no place in either. On a terminal it is one line rewritten in
// place (\r) at most every progressEvery; elsewhere (a CI log, a file) it is a
// plain line every plainEvery, never a \r, so a long run still shows it is alive
// and short runs (tests) print none.
const (
	progressEvery = 250 * time.Millisecond
	plainEvery    = 10 * time.Second
	barWidth      = 30
)

// ProgressWriter writes verify's progress to w.
type ProgressWriter struct {
	w        io.Writer
	terminal bool
	now      func() time.Time
	last     time.Time // the last line written, or the start
	drawn    bool      // an in-place line is on the terminal
}

// NewProgressWriter returns a writer of in-place lines if terminal, else of plain
// lines; now is its clock.
func NewProgressWriter(w io.Writer, terminal bool, now func() time.Time) *ProgressWriter {
	return &ProgressWriter{w: w, terminal: terminal, now: now, last: now()}
}

// IsTerminal reports whether w is a terminal (a character device: /dev/null is
// one too, where the lines are harmless).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Update is Flow's Progress: it writes p if the last line is old enough.
func (b *ProgressWriter) Update(p Progress) {
	t := b.now()
	every := plainEvery
	if b.terminal {
		every = progressEvery
	}
	if (b.drawn || !b.terminal) && t.Sub(b.last) < every {
		return
	}
	b.last = t
	phase := "placing"
	if p.Settling {
		phase = "settling"
	}
	counts := fmt.Sprintf("placed %d/%d · applied %d · paid %d · faults %d · %s", p.Placed, p.Orders, p.Applied, p.Paid, p.Faults, phase)
	if !b.terminal {
		fmt.Fprintf(b.w, "idem verify: %s\n", strings.ReplaceAll(counts, " · ", ", "))
		return
	}
	done := min(p.Applied*barWidth/max(p.Orders, 1), barWidth)
	fmt.Fprintf(b.w, "\r[%s%s] %s\033[K", strings.Repeat("#", done), strings.Repeat(".", barWidth-done), counts)
	b.drawn = true
}

// Clear erases the in-place line before the report is written.
func (b *ProgressWriter) Clear() {
	if b.drawn {
		fmt.Fprint(b.w, "\r\033[K")
		b.drawn = false
	}
}
