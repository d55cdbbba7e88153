package sqlitefull

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

type coded int

func (c coded) Error() string { return fmt.Sprintf("sqlite code %d", int(c)) }
func (c coded) Code() int     { return int(c) }

func TestTx(t *testing.T) {
	full := fmt.Errorf("exec: %w", coded(13|3<<8)) // an extended SQLITE_FULL
	err := Tx(full)
	if !errors.Is(err, ErrDiskFull) || !errors.Is(err, coded(13|3<<8)) ||
		!strings.Contains(err.Error(), "free space on the volume of the database, nothing of this transaction was stored") {
		t.Fatalf("Tx(SQLITE_FULL) = %v, want it to match ErrDiskFull and the driver's error, and name the fix", err)
	}
	if again := Tx(err); again != err {
		t.Fatalf("Tx of an explained error wrapped it again: %v", again)
	}
	for _, other := range []error{nil, coded(5), errors.New("disk is full, says someone else")} {
		if got := Tx(other); got != other || errors.Is(got, ErrDiskFull) {
			t.Fatalf("Tx(%v) = %v, want it unchanged", other, got)
		}
	}
}
