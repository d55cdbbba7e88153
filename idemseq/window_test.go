package idemseq_test

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemseq"
)

func TestNewWindowSizes(t *testing.T) {
	t.Parallel()
	for _, size := range []int{0, 1, 63, 100, 1000, idemseq.MaxWindow * 2} {
		if _, err := idemseq.NewWindow(size); !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("NewWindow(%d) = %v, want idem.ErrInvalid", size, err)
		}
	}
	for _, size := range []int{idemseq.MinWindow, idemseq.DefaultWindow, idemseq.MaxWindow} {
		if w, err := idemseq.NewWindow(size); err != nil || w.Size() != size {
			t.Errorf("NewWindow(%d) = %v, %v", size, w, err)
		}
	}
}

// TestWindowStateSize pins the bound: a producer's state with a 1,024-number
// window fits in 256 bytes (the struct and its bitmap).
func TestWindowStateSize(t *testing.T) {
	t.Parallel()
	w, _ := idemseq.NewWindow(1024)
	size := int(unsafe.Sizeof(*w)) + len(w.Bitmap())
	if size > 256 {
		t.Fatalf("state of a 1,024 window = %d bytes, want at most 256", size)
	}
	t.Logf("state of a 1,024 window: %d bytes", size)
}

func TestWindowBitmapRoundTrip(t *testing.T) {
	t.Parallel()
	w, _ := idemseq.NewWindow(128)
	for _, seq := range []uint64{500, 498, 450, 400} {
		w.Check(3, seq)
	}
	r, _ := idemseq.NewWindow(128)
	if err := r.Load(w.Epoch(), w.Next(), w.Bitmap()); err != nil {
		t.Fatal(err)
	}
	for seq, want := range map[uint64]idemseq.Verdict{500: idemseq.Duplicate, 498: idemseq.Duplicate,
		450: idemseq.Duplicate, 400: idemseq.Duplicate, 499: idemseq.Accepted, 372: idemseq.TooOld} {
		if v, _ := r.Check(3, seq); v != want {
			t.Errorf("after Load, Check(%d) = %v, want %v", seq, v, want)
		}
	}
	if err := r.Load(1, 10, make([]byte, 12)); err == nil {
		t.Error("Load of a 12-byte bitmap succeeded; want an error naming the corrupt state")
	}
}

func TestVerdictStrings(t *testing.T) {
	t.Parallel()
	for v, want := range map[idemseq.Verdict]string{idemseq.Accepted: "accepted", idemseq.Duplicate: "duplicate",
		idemseq.TooOld: "too_old", idemseq.Fenced: "fenced", 0: "verdict(0)"} {
		if v.String() != want {
			t.Errorf("%d.String() = %q, want %q", v, v.String(), want)
		}
	}
}
