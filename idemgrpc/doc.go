// Package idemgrpc makes gRPC calls take effect once: a client interceptor that
// gives each logical call one idempotency key, reused by every retry and hedged
// copy of the call, and a server interceptor that runs a key's handler once and
// answers every other copy with the stored result.
//
// A unary call whose response is lost on the wire (a connection reset, a proxy
// timeout) is retried by grpc-go's retry policy, and hedging (gRFC A6: grpc-java
// and gRPC C-core implement its hedgingPolicy; grpc-go, as of v1.84, parses none
// and sends no hedges) sends up to five copies on purpose; without a key the
// server acts on each. With the interceptors:
//
//	// server
//	idem, err := idemgrpc.UnaryServerInterceptor(idemgrpc.Config{Store: store})
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(auth, idem),
//		grpc.StreamInterceptor(idemgrpc.StreamServerInterceptor()))
//
//	// client
//	keys, err := idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{})
//	conn, err := grpc.NewClient(addr, grpc.WithUnaryInterceptor(keys),
//		grpc.WithDefaultServiceConfig(retryPolicy))
//
// # The key
//
// The key travels in the metadata idempotency-key (MetadataKey), or in a string
// field of the request (Config.RequestField: AIP-155's request_id, AEP-155's
// idempotency_key). It is scoped by the caller as the transport and the call
// prove it (CredentialScope: the verified TLS client certificate and the
// authorization metadata; never a name the caller merely claims), and the call is
// fingerprinted by its full method name and its request message (marshaled
// deterministically), so the same key on another request is a conflict, not a
// replay. Keys are checked as idemhttp checks Idempotency-Key: printable ASCII, at
// most 255 bytes, and a time-embedded key older than Config.MaxKeyAge is refused.
//
// # What a call is answered
//
//	first call with a key        the handler runs; its result is stored
//	retry, hedged copy           the stored result: response message, or the status
//	                             with its details; the handler's headers (plus
//	                             idempotent-replayed: true) and trailers
//	same key, call running       Unavailable, ReasonKeyInProgress, RetryInfo and the
//	                             grpc-retry-pushback-ms trailer (≤ 1 s)
//	same key, another request    FailedPrecondition, ReasonKeyReused
//	key missing (RequireKey),    InvalidArgument, ReasonInvalidKey
//	  sent twice, malformed
//	key too old                  FailedPrecondition, ReasonKeyExpired
//	key from the future          InvalidArgument, ReasonKeyFromFuture
//	call ended before its claim  DeadlineExceeded or Canceled, ReasonCallEnded
//	  (deadline passed, canceled)  (not run)
//	store unavailable            Unavailable, ReasonStoreUnavailable (not run)
//	over MaxInFlight             ResourceExhausted, ReasonOverloaded (not run)
//	result too large to store    Internal, ReasonNotStored (run once, not again)
//
// Every status the interceptor answers carries a google.rpc.ErrorInfo with domain
// ErrorDomain and one of the Reason constants; Reason reads it.
//
// Why Unavailable for a call in progress: it is the one code every retry policy
// lists as retryable (gRPC's status code guide: "a transient condition, which can
// be corrected by retrying with a backoff") and hedging treats as non-fatal, so a
// hedged copy that lands while the first copy runs waits for the pushback and
// asks again instead of failing the whole call. The retry is answered with the
// first copy's result. Aborted would say "retry at a higher level", which is not
// what the caller should do; FailedPrecondition would stop the retries. Set
// Config.Wait to hold such a copy on the server until the first one finishes.
//
// Why FailedPrecondition for a key reused with another request: the request is
// valid on its own (not InvalidArgument) and the server's state, the key's
// earlier use, refuses it; no retry policy retries it, and the client must not:
// it needs a new key.
//
// # Which results are stored
//
// Every result is stored and replayed, errors included, except those that ask
// the caller to retry: Unavailable, ResourceExhausted, Aborted, Canceled and
// DeadlineExceeded give the key back, so the retry runs the handler again. The
// server errors Internal, Unknown, DataLoss and Unimplemented are stored unless
// Config.StoreServerErrors is false.
//
// # Slow handlers, dead holders
//
// The handler runs in a context detached from the call's cancellation and
// deadline: a caller that gave up must not abort the first execution halfway,
// since its retry will be answered with the result. While it runs, the key's lease
// is renewed every Lease/3, so a handler slower than the lease keeps its key and
// its copies are told to wait; a server killed mid-call stops renewing, and once
// the lease runs out a retry runs the call again.
//
// # Atomic mode
//
// AtomicUnaryServerInterceptor claims the key, runs the handler and stores its
// result in one transaction of a SQL store's database (Postgres, MySQL, SQLite):
// the handler writes through TxFrom, and a crash leaves all of it or none.
//
// # Streaming methods
//
// Streaming calls are not deduplicated: a stream interleaves messages both ways,
// and grpc-go retries a stream only until its first response and never hedges
// one. StreamServerInterceptor refuses a streaming call that carries a key
// (Unimplemented) rather than run it unguarded while the caller believes it is
// guarded. Key each streamed message instead and consume them with the inbox, or
// make the effect a unary call.
//
// # Lineage
//
// The handler's context carries the key lineage (idem.KeyFrom), as the HTTP
// middleware's does: a downstream gRPC call made through UnaryClientInterceptor,
// or an HTTP call through idemhttp.Transport, derives its key from it, so a
// handler that runs again makes the same downstream calls under the same keys.
package idemgrpc
