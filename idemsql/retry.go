package idemsql

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"time"
)

// IsSerializationFailure reports whether err is the database rolling a transaction
// back to break a deadlock or a serialization conflict (SQLSTATE 40001 or 40P01:
// PostgreSQL's serialization_failure and deadlock_detected, MySQL's ER_LOCK_DEADLOCK),
// after which running the whole transaction again is the expected answer.
func IsSerializationFailure(err error) bool {
	if err == nil {
		return false
	}
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) {
		st := coded.SQLState()
		return st == "40001" || st == "40P01"
	}
	// go-sql-driver/mysql's error has the state in its message only: "Error 1213 (40001): …".
	msg := err.Error()
	return strings.Contains(msg, "Error 1213 (40001)") || strings.Contains(msg, "Error 1213: ")
}

// RetrySerializationFailures runs attempt again while it fails with an error
// IsSerializationFailure recognises, after a short random pause (a millisecond at
// first, doubling to 100 ms, so the transactions a deadlock chose between do not
// meet again at once), at most 12 times in all. attempt should run one whole
// transaction; the last error is returned.
func RetrySerializationFailures(ctx context.Context, attempt func() error) error {
	pause := time.Millisecond
	for run := 1; ; run++ {
		err := attempt()
		if run == maxSerializationRuns || !IsSerializationFailure(err) {
			return err
		}
		t := time.NewTimer(pause/2 + rand.N(pause))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// maxSerializationRuns bounds RetrySerializationFailures.
const maxSerializationRuns = 12
