package idemseq

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/idemhq/idem"
)

// Verdict is what a tracker says of one (epoch, sequence) pair. Like idem.Outcome, a
// duplicate is a verdict, not an error.
type Verdict uint8

const (
	// Accepted: the number was not seen before; apply the effect.
	Accepted Verdict = iota + 1
	// Duplicate: the number was seen before; acknowledge the message, do not apply it.
	Duplicate
	// TooOld: the number is below the window, so whether it was seen is unknown. It is
	// not accepted: raise Window or dead-letter the message for a person to judge.
	TooOld
	// Fenced: the message carries an older epoch than the producer's latest
	// registration: it comes from a zombie incarnation and must not be applied.
	Fenced
)

// String returns the verdict's label, as used in metrics and logs.
func (v Verdict) String() string {
	switch v {
	case Accepted:
		return "accepted"
	case Duplicate:
		return "duplicate"
	case TooOld:
		return "too_old"
	case Fenced:
		return "fenced"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

const (
	// DefaultWindow is the number of sequence numbers below the watermark a tracker
	// remembers individually: 1,024 numbers in 128 bytes.
	DefaultWindow = 1024
	// MinWindow and MaxWindow bound Window; it must be a power of two between them.
	MinWindow = 64
	MaxWindow = 1 << 20
	// MaxSeq is the largest sequence number and epoch a tracker takes. It is 2^53-1 on
	// every backend so that the Redis tracker, whose scripts count in float64, keeps the
	// same contract; at a million messages a second it lasts 285 years.
	MaxSeq = 1<<53 - 1
)

// Window is one producer's dedup state: its epoch, the next number above the
// watermark, and a ring bitmap of the Window numbers below it. It is the pure core that
// every tracker runs; it is not safe for concurrent use.
type Window struct {
	epoch uint64
	next  uint64 // highest accepted number + 1; 0 until a number is accepted
	mask  uint64 // size - 1
	bits  []uint64
}

// NewWindow returns an empty window remembering size numbers below its watermark.
func NewWindow(size int) (*Window, error) {
	if err := checkSize(size); err != nil {
		return nil, err
	}
	return &Window{mask: uint64(size - 1), bits: make([]uint64, size/64)}, nil
}

func checkSize(size int) error {
	if size < MinWindow || size > MaxWindow || size&(size-1) != 0 {
		return &idem.InputError{Field: "Window",
			Reason: fmt.Sprintf("must be a power of two between %d and %d (got %d)", MinWindow, MaxWindow, size),
			Fix:    fmt.Sprintf("use %d, or the next power of two above the reordering you expect", DefaultWindow)}
	}
	return nil
}

// Epoch returns the latest epoch the window has seen.
func (w *Window) Epoch() uint64 { return w.epoch }

// Next returns the number after the highest accepted one: where a restarted producer
// continues. It is 0 before the first number is accepted.
func (w *Window) Next() uint64 { return w.next }

// Size returns how many numbers below the watermark the window remembers.
func (w *Window) Size() int { return int(w.mask + 1) }

// Check records seq from a producer at epoch and returns the verdict. changed reports
// whether the state moved (a number was accepted or a newer epoch adopted), that is,
// whether a persistent tracker must write it back.
func (w *Window) Check(epoch, seq uint64) (v Verdict, changed bool) {
	if epoch < w.epoch {
		return Fenced, false
	}
	changed = epoch > w.epoch
	w.epoch = epoch
	if seq >= w.next {
		w.advance(seq)
		return Accepted, true
	}
	if w.next-seq > w.mask+1 {
		return TooOld, changed
	}
	i := seq & w.mask
	word, bit := i>>6, uint64(1)<<(i&63)
	if w.bits[word]&bit != 0 {
		return Duplicate, changed
	}
	w.bits[word] |= bit
	return Accepted, true
}

// advance moves the watermark to seq: the ring slots of the numbers from next to seq
// held numbers that fall out of the window, so they are cleared, then seq is marked.
func (w *Window) advance(seq uint64) {
	if n := seq - w.next + 1; n > w.mask {
		clear(w.bits)
	} else {
		w.clearRange(w.next, n)
	}
	i := seq & w.mask
	w.bits[i>>6] |= 1 << (i & 63)
	w.next = seq + 1
}

// clearRange clears n ring slots starting at the slot of from, a word at a time.
func (w *Window) clearRange(from, n uint64) {
	for n > 0 {
		i := from & w.mask
		off := i & 63
		k := min(64-off, n)
		w.bits[i>>6] &^= (^uint64(0) >> (64 - k)) << off
		from += k
		n -= k
	}
}

// seen reports whether seq is remembered as accepted (inside the window and marked).
func (w *Window) seen(seq uint64) bool {
	if seq >= w.next || w.next-seq > w.mask+1 {
		return false
	}
	i := seq & w.mask
	return w.bits[i>>6]&(1<<(i&63)) != 0
}

// Bitmap returns the ring bitmap as little-endian bytes, for persistent trackers.
func (w *Window) Bitmap() []byte {
	b := make([]byte, 8*len(w.bits))
	for i, x := range w.bits {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	return b
}

// Load replaces the state with a persisted one. A bitmap saved under another window
// size is re-laid into this one, keeping the numbers both windows cover, so changing
// Window in the configuration never forgets a number the smaller window still covers.
func (w *Window) Load(epoch, next uint64, bitmap []byte) error {
	w.epoch, w.next = epoch, next
	clear(w.bits)
	switch {
	case len(bitmap) == 0:
		return nil
	case len(bitmap)%8 != 0 || bits.OnesCount(uint(len(bitmap)*8)) != 1:
		return fmt.Errorf("idemseq: stored bitmap of %d bytes is not a window (a power of two of 64-bit words)", len(bitmap))
	case len(bitmap) == 8*len(w.bits):
		for i := range w.bits {
			w.bits[i] = binary.LittleEndian.Uint64(bitmap[8*i:])
		}
		return nil
	}
	old := Window{epoch: epoch, next: next, mask: uint64(len(bitmap)*8 - 1), bits: make([]uint64, len(bitmap)/8)}
	for i := range old.bits {
		old.bits[i] = binary.LittleEndian.Uint64(bitmap[8*i:])
	}
	span := min(old.mask, w.mask) + 1
	for seq := next - min(span, next); seq < next; seq++ {
		if old.seen(seq) {
			i := seq & w.mask
			w.bits[i>>6] |= 1 << (i & 63)
		}
	}
	return nil
}

// CheckArgs validates what every tracker takes from its caller: a producer name with
// the rules of idem.Key, and numbers up to MaxSeq. Trackers in other packages call it
// so that bad input fails the same way on every backend.
func CheckArgs(producer string, epoch, seq uint64) error {
	if err := (idem.Key{Scope: "idemseq", ID: producer}).Validate(); err != nil {
		ie := err.(*idem.InputError)
		return &idem.InputError{Field: "producer", Reason: ie.Reason, Fix: ie.Fix}
	}
	if seq > MaxSeq {
		return &idem.InputError{Field: "seq", Reason: fmt.Sprintf("is above %d (got %d)", uint64(MaxSeq), seq),
			Fix: "number messages from 0 or 1 upwards; register a new producer instead of wrapping"}
	}
	if epoch > MaxSeq {
		return &idem.InputError{Field: "epoch", Reason: fmt.Sprintf("is above %d (got %d)", uint64(MaxSeq), epoch),
			Fix: "use the epoch Register returned"}
	}
	return nil
}
