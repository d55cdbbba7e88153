package idemgrpc

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail that every status
// the interceptor itself answers carries, with one of the Reason constants.
const ErrorDomain = "idem.idemhq.github.com"

// The reasons of the statuses the interceptor answers (ErrorInfo.Reason). A client
// can tell them apart with Reason.
const (
	// ReasonInvalidKey: InvalidArgument; the key is missing (Config.RequireKey),
	// sent twice, not printable ASCII or longer than 255 bytes.
	ReasonInvalidKey = "IDEMPOTENCY_KEY_INVALID"
	// ReasonInvalidScope: InvalidArgument; the store or Config.Scope refused the
	// caller's scope.
	ReasonInvalidScope = "IDEMPOTENCY_SCOPE_INVALID"
	// ReasonKeyInProgress: Unavailable, with a RetryInfo and the
	// grpc-retry-pushback-ms trailer; a call with the same key is running. Retry
	// the same call with the same key: it is answered with that call's result.
	ReasonKeyInProgress = "IDEMPOTENCY_KEY_IN_PROGRESS"
	// ReasonKeyReused: FailedPrecondition; the key was used for another request
	// (another method, message or fingerprinted metadata). Use a new key for a new
	// request.
	ReasonKeyReused = "IDEMPOTENCY_KEY_REUSED"
	// ReasonKeyExpired: FailedPrecondition; the key is older than Config.MaxKeyAge.
	ReasonKeyExpired = "IDEMPOTENCY_KEY_EXPIRED"
	// ReasonCallEnded: DeadlineExceeded or Canceled; the call had ended when it
	// reached the interceptor (its deadline passed while it waited in the server,
	// or its caller cancelled it), so it was neither claimed nor run. Counted in
	// idem_grpc_refused_total{reason="deadline"}.
	ReasonCallEnded = "IDEMPOTENCY_CALL_ENDED"
	// ReasonKeyFromFuture: InvalidArgument; the key is dated ahead of the server's
	// clock by more than idemkey.MaxSkew.
	ReasonKeyFromFuture = "IDEMPOTENCY_KEY_FROM_FUTURE"
	// ReasonUntimedKey: InvalidArgument; Config.RequireTimedKeys and the key
	// carries no time.
	ReasonUntimedKey = "IDEMPOTENCY_KEY_UNTIMED"
	// ReasonStoreUnavailable: Unavailable, with a retry pushback; the store failed,
	// the handler did not run.
	ReasonStoreUnavailable = "IDEMPOTENCY_STORE_UNAVAILABLE"
	// ReasonOverloaded: ResourceExhausted, with a retry pushback; beyond
	// Config.MaxInFlight.
	ReasonOverloaded = "IDEMPOTENCY_OVERLOADED"
	// ReasonNotStored: Internal; the first call ran but its result was too large
	// to store (or not a protobuf message), so it cannot be replayed and is not
	// run again.
	ReasonNotStored = "IDEMPOTENCY_RESPONSE_NOT_STORED"
	// ReasonCorruptRecord: Internal; the stored result could not be read.
	ReasonCorruptRecord = "IDEMPOTENCY_RECORD_CORRUPT"
	// ReasonNotCommitted: Unavailable (atomic interceptor); the handler's
	// transaction did not commit, so neither its effects nor its result were kept.
	ReasonNotCommitted = "IDEMPOTENCY_NOT_COMMITTED"
)

// Reason returns the ErrorInfo reason of a status the interceptor answered (one of
// the Reason constants), or "" for any other error.
func Reason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == ErrorDomain {
			return ei.GetReason()
		}
	}
	return ""
}

// statusf returns a status error of code with an ErrorInfo of reason and, when
// retry is not nil, a RetryInfo.
func statusf(code codes.Code, reason string, retry *time.Duration, format string, args ...any) error {
	st := status.New(code, fmt.Sprintf(format, args...))
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}}
	if retry != nil {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(*retry)})
	}
	if d, err := st.WithDetails(details...); err == nil {
		st = d
	}
	return st.Err()
}

// pushback sets the grpc-retry-pushback-ms trailer, with which grpc-go's retry
// policy waits d before its next attempt (gRFC A6) instead of its own backoff.
func pushback(ctx context.Context, d time.Duration) {
	_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", strconv.FormatInt(d.Milliseconds(), 10)))
}
