package idemnats

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// The errors of a leader election are retried; a refusal is not. A clustered
// stream answers the retry of a publish whose first copy it is still proposing
// with 409 "duplicate message id is in process" (seen in TestClusterLeaderIsolated
// under load): the copy is about to be stored, so the retry is repeated until it
// is answered as a duplicate.
func TestTransient(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{Code: 409, ErrorCode: jsDuplicateInProcess, Description: "duplicate message id is in process"}, true},
		{fmt.Errorf("publish: %w", &jetstream.APIError{Code: 409, ErrorCode: jsDuplicateInProcess}), true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{&jetstream.APIError{Code: 409, ErrorCode: 10071, Description: "wrong last sequence"}, false},
		{&jetstream.APIError{Code: 400, ErrorCode: jsStoreFailed, Description: "maximum messages per subject exceeded"}, false},
		{jetstream.ErrMsgAlreadyAckd, false},
	} {
		if got := transient(ctx, tc.err); got != tc.want {
			t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if transient(cancelled, &jetstream.APIError{Code: 503}) {
		t.Error("transient with the caller's ctx cancelled = true, want false")
	}
}
