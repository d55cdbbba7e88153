package idemgrpc

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/heartbeat"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/wait"
)

// finishTimeout bounds the store calls made after the handler ran (Complete,
// Release, Commit), which run detached from the call so a client that left does
// not stop its result from being recorded.
const finishTimeout = 10 * time.Second

// storeRetryAfter is the pushback of a call refused because the store failed or
// the server is over Config.MaxInFlight.
const storeRetryAfter = time.Second

// maxInProgressPushback bounds the pushback of a call whose key is in progress:
// the holder's lease, renewed while it runs, says nothing of when it will finish,
// and grpc-go's retry policy spends an attempt per pushback.
const maxInProgressPushback = time.Second

// UnaryServerInterceptor returns the server interceptor of idempotent unary calls:
// the first call with a key runs the handler and stores its result (the response
// message or the error's status, with the headers and trailers the handler set);
// a retry or hedged copy with the same key gets that result again, with the
// header idempotent-replayed: true, and the handler does not run. See the package
// documentation for every status it answers.
//
// The handler runs only while the key is claimed in Config.Store. When the store
// fails, the call is answered Unavailable (with a retry pushback) and the handler
// does not run: running it unclaimed could run it twice, while Unavailable is
// always safe to retry.
//
// The error is an *idem.InputError naming a bad Config field, or the Registerer's.
func UnaryServerInterceptor(cfg Config) (grpc.UnaryServerInterceptor, error) {
	s, err := newServer(cfg, true)
	if err != nil {
		return nil, err
	}
	s.renewer, _ = s.cfg.Store.(idem.Renewer)
	s.run = s.runPlain
	return s.intercept, nil
}

// StreamServerInterceptor returns the interceptor for streaming methods, which
// idem does not deduplicate: a stream interleaves messages both ways, and
// replaying one would mean storing every message and re-driving the peer's
// side, which no retry policy asks for (grpc-go retries a stream only until its
// first response, and hedges none). So a streaming call that carries an
// idempotency key is answered Unimplemented (reason IDEMPOTENCY_KEY_INVALID)
// instead of running unguarded while its caller believes it is guarded; streams
// without a key pass through. Make the effect a unary call, or key each streamed
// message and consume them through the inbox.
func StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		if len(md[MetadataKey]) > 0 {
			return statusf(codes.Unimplemented, ReasonInvalidKey, nil,
				"idem: %s is a streaming method, whose calls idem does not deduplicate, but the call carries %s: make the effect a unary call, or send the call without a key", info.FullMethod, MetadataKey)
		}
		return handler(srv, ss)
	}
}

// server is what the plain and the atomic interceptor share: the checks before a
// claim and the answers to duplicates. run claims the key and executes the
// handler.
type server struct {
	cfg Config
	m   *metrics.HTTP
	// renewer is the store's idem.Renewer: nil when it has none, and in atomic
	// mode, where the claim is held by the transaction.
	renewer  idem.Renewer
	inFlight atomic.Int64
	// retention is what a claim keeps its record for (see idemhttp).
	retention time.Duration
	methods   map[string]bool // Config.Methods; nil: all unary methods with effects
	info      sync.Map        // full method name → *methodInfo
	run       func(ctx context.Context, req any, mi *methodInfo, handler grpc.UnaryHandler, c idem.Claim) (any, metrics.HTTPOutcome, error)
}

func newServer(cfg Config, needStore bool) (*server, error) {
	cfg, err := cfg.withDefaults(needStore)
	if err != nil {
		return nil, err
	}
	s := &server{cfg: cfg, retention: cfg.Retention}
	if cfg.MaxKeyAge > 0 {
		s.retention = max(cfg.Retention, cfg.MaxKeyAge+idemkey.MaxSkew)
	}
	if cfg.Methods != nil {
		s.methods = make(map[string]bool, len(cfg.Methods))
		for _, m := range cfg.Methods {
			s.methods[m] = true
		}
	}
	if s.m, err = metrics.NewGRPC(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("idemgrpc: register metrics: %w", err)
	}
	return s, nil
}

func (s *server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	mi := s.method(info.FullMethod)
	if !mi.applies {
		return handler(ctx, req)
	}
	start := s.m.Start()
	resp, o, err := s.serve(ctx, req, mi, handler)
	s.m.Done(o, start)
	return resp, err
}

// serve runs the checks that need no store (key, age, scope, in-flight cap),
// fingerprints the call and hands it to run.
func (s *server) serve(ctx context.Context, req any, mi *methodInfo, handler grpc.UnaryHandler) (any, metrics.HTTPOutcome, error) {
	md := metadata.MD{} // on the stack: incoming fills it, nothing keeps it
	incoming(ctx, md, s.cfg.FingerprintMetadata)
	key, found, err := callKey(md, req, s.cfg.RequestField)
	if err != nil {
		return nil, metrics.HTTPRejected, err
	}
	if !found {
		if s.cfg.RequireKey {
			where := "metadata " + MetadataKey
			if s.cfg.RequestField != "" {
				where += " (or the request's field " + string(s.cfg.RequestField) + ")"
			}
			return nil, metrics.HTTPRejected, statusf(codes.InvalidArgument, ReasonInvalidKey, nil,
				"idem: %s is missing: %s requires one; send one unique key per call (idemgrpc.UnaryClientInterceptor does) and the same key on every retry", where, mi.name)
		}
		resp, err := handler(ctx, req)
		return resp, metrics.HTTPPassthrough, err
	}
	if err := ended(ctx); err != nil {
		s.m.Refused(metrics.RefusedDeadline)
		return nil, metrics.HTTPRejected, err
	}
	if err := s.refuse(key); err != nil {
		return nil, metrics.HTTPRejected, err
	}
	scope, err := s.cfg.Scope(ctx)
	if err != nil {
		return nil, metrics.HTTPRejected, scopeError(err)
	}
	if !s.enter(ctx) {
		return nil, metrics.HTTPRejected, statusf(codes.ResourceExhausted, ReasonOverloaded, ptr(storeRetryAfter),
			"idem: more than %d idempotent calls are in flight (Config.MaxInFlight): retry with the same key after the pushback", s.cfg.MaxInFlight)
	}
	defer s.leave()
	fp, err := fingerprint(mi.name, md, s.cfg.FingerprintMetadata, req)
	if err != nil {
		return nil, metrics.HTTPRejected, err
	}
	c := idem.Claim{Key: idem.Key{Scope: scope, ID: key}, Fingerprint: fp[:], Lease: s.cfg.Lease, Retention: s.retention}
	// The call's span, if a tracing stats handler (otelgrpc) made one, gets the key
	// and the claim's outcome, as the HTTP middleware's span does.
	otelx.SetKey(trace.SpanFromContext(ctx), c.Key)
	return s.run(ctx, req, mi, handler, c)
}

// incoming sets md to the call's metadata under MetadataKey and keys, the only
// keys the interceptor reads. It copies those values alone, where
// metadata.FromIncomingContext copies every key the call carries (a map and a
// slice per key, on every call, twice with CredentialScope).
func incoming(ctx context.Context, md metadata.MD, keys []string) {
	md[MetadataKey] = metadata.ValueFromIncomingContext(ctx, MetadataKey)
	for _, k := range keys {
		md[k] = metadata.ValueFromIncomingContext(ctx, k)
	}
}

// ended returns the status of a call that ended before it was claimed: its
// deadline passed while it waited in the server (gRPC's form of idemhttp's
// Idem-Deadline refusal), or its caller cancelled it. Its caller has given up
// and may have made the call again under another key, so it must not run. Once
// claimed, the handler runs detached from the call (see execute). Which of the
// two a call meets first is a race (the caller's cancellation, sent as its
// deadline passes, often ends the server's context first), so both are refused
// alike. The deadline is wall-clock time, as grpc-go's are, not Config.Now.
func ended(ctx context.Context) error {
	d, hasDeadline := ctx.Deadline()
	passed := hasDeadline && !time.Now().Before(d)
	if ctx.Err() == nil && !passed {
		return nil
	}
	code, why := codes.Canceled, "its caller cancelled it"
	if passed || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code, why = codes.DeadlineExceeded, "its deadline passed"
	}
	return statusf(code, ReasonCallEnded, nil,
		"idem: the call had ended (%s) before it was claimed, so it was not run: its caller had given up; call again with a later deadline if it is still wanted", why)
}

// scopeError is the status of a scope Config.Scope refused.
func scopeError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err // the Scope function chose its status (Unauthenticated, say)
	}
	return statusf(codes.InvalidArgument, ReasonInvalidScope, nil, "%v", err)
}

// enter counts a call in flight; false beyond Config.MaxInFlight.
func (s *server) enter(ctx context.Context) bool {
	if s.cfg.MaxInFlight < 0 {
		return true
	}
	if s.inFlight.Add(1) > int64(s.cfg.MaxInFlight) {
		s.inFlight.Add(-1)
		pushback(ctx, storeRetryAfter)
		return false
	}
	return true
}

func (s *server) leave() {
	if s.cfg.MaxInFlight >= 0 {
		s.inFlight.Add(-1)
	}
}

// fingerprint hashes the call's intent: SHA-256 over the full method name, each
// fingerprinted metadata key with its values, and the request message marshaled
// deterministically. Every field is length-prefixed.
func fingerprint(method string, md metadata.MD, keys []string, req any) ([sha256.Size]byte, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return [sha256.Size]byte{}, statusf(codes.Internal, ReasonInvalidKey, nil,
			"idem: the request of %s is a %T, not a protobuf message, so it cannot be fingerprinted: idemgrpc needs the protobuf codec", method, req)
	}
	var stack [512]byte
	b := appendField(stack[:0], method)
	for _, k := range keys {
		vs := md[k]
		b = appendField(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendField(b, v)
		}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(b, m)
	if err != nil {
		return [sha256.Size]byte{}, statusf(codes.InvalidArgument, ReasonInvalidKey, nil, "idem: the request of %s cannot be marshaled: %v", method, err)
	}
	return sha256.Sum256(b), nil
}

// runPlain is run for UnaryServerInterceptor: claim, then execute or answer the
// duplicate.
func (s *server) runPlain(ctx context.Context, req any, mi *methodInfo, handler grpc.UnaryHandler, c idem.Claim) (any, metrics.HTTPOutcome, error) {
	res, err := s.cfg.Store.Claim(ctx, c)
	if err == nil && res.Outcome == idem.InProgress && s.cfg.Wait > 0 {
		res, err = s.wait(ctx, res, func() (idem.Result, error) { return s.cfg.Store.Claim(ctx, c) })
	}
	if err != nil {
		return nil, metrics.HTTPError, s.storeFailed(ctx, "claim", c.Key, err)
	}
	otelx.SetOutcome(trace.SpanFromContext(ctx), res.Outcome, res.Token)
	if res.Outcome != idem.Acquired {
		return s.answerDuplicate(ctx, mi, c.Key, res)
	}
	return s.execute(ctx, req, mi, handler, c.Key, res.Token)
}

// execute runs the handler under the claimed key and stores its result.
//
// The handler's context is detached from the call's (context.WithoutCancel keeps
// its values, drops its cancellation and deadline): a client that gave up or cut
// the connection must not abort the first execution halfway, since its retry is
// expected to be answered with the result.
func (s *server) execute(ctx context.Context, req any, mi *methodInfo, handler grpc.UnaryHandler, k idem.Key, token uint64) (any, metrics.HTTPOutcome, error) {
	hctx, held := s.handlerContext(ctx, k)
	returned := false
	hb := heartbeat.Start(s.renewer, k, token, s.cfg.Lease, s.cfg.Logger)
	defer func() {
		if !returned {
			// The handler panicked: give the key back so a retry runs the call
			// again rather than waiting out the lease; the panic goes on.
			hb.Stop()
			s.release(ctx, k, token)
		}
	}()
	resp, herr := handler(hctx, req)
	returned = true
	hb.Stop()

	b, keep, whole := s.result(mi, resp, herr, held)
	if !keep {
		s.release(ctx, k, token)
		held.flush()
		return resp, metrics.HTTPExecuted, herr
	}
	if !whole {
		s.cfg.Logger.WarnContext(ctx, "idem: the result of a call is too large to store for replay; a retry will be told so and not run again",
			"method", mi.name, "key", k.String(), "limit", s.cfg.MaxResponseBytes)
	}
	fctx, cancel := context.WithTimeout(hctx, finishTimeout)
	defer cancel()
	if err := s.cfg.Store.Complete(fctx, k, token, b); err != nil {
		// The effect happened: the caller still gets its result. A retry is not
		// replayed: it gets Unavailable until the lease ends, then runs again.
		s.cfg.Logger.WarnContext(ctx, "idem: the result could not be stored for replay", "method", mi.name, "key", k.String(), "err", err)
	}
	held.flush()
	return resp, metrics.HTTPExecuted, herr
}

// handlerContext returns the context the handler runs in: detached from the
// call's cancellation, carrying the key lineage (idem.KeyFrom: outgoing calls
// derive their keys from it) and a transport stream that holds the headers and
// trailers the handler sets, so they can be stored with its result.
func (s *server) handlerContext(ctx context.Context, k idem.Key) (context.Context, *heldStream) {
	held := &heldStream{inner: grpc.ServerTransportStreamFromContext(ctx)}
	hctx := context.WithoutCancel(ctx)
	hctx = idem.WithKeyFunc(hctx, func() string { return idemkey.Derive(k.ID, k.Scope) })
	return grpc.NewContextWithServerTransportStream(hctx, held), held
}

// result returns the stored form of the handler's result. keep is false when the
// result must not be stored (a transient code, or a server error with
// StoreServerErrors false): the key is to be given back. whole is false when b is
// the marker of a result too large (or not a protobuf message) to store.
func (s *server) result(mi *methodInfo, resp any, herr error, held *heldStream) (b []byte, keep, whole bool) {
	st := status.Convert(herr)
	if !s.storable(st.Code()) {
		return nil, false, true
	}
	var stBytes, respBytes []byte
	var err error
	if herr != nil {
		stBytes, err = proto.Marshal(st.Proto())
	} else if m, ok := resp.(proto.Message); ok {
		mi.learn(m)
		respBytes, err = proto.Marshal(m)
	} else {
		err = fmt.Errorf("the response is a %T, not a protobuf message", resp)
	}
	if err != nil {
		return encodeTooLarge(uint32(st.Code()), 0), true, false
	}
	header, trailer := held.metadata()
	if b, ok := encodeStored(stBytes, respBytes, header, trailer, s.cfg.MaxResponseBytes); ok {
		return b, true, true
	}
	return encodeTooLarge(uint32(st.Code()), len(stBytes)+len(respBytes)+mdLen(header)+mdLen(trailer)), true, false
}

// storable reports whether a result with code is kept for replay.
func (s *server) storable(code codes.Code) bool {
	switch code {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.Canceled, codes.DeadlineExceeded:
		return false // transient: the caller is asked to retry, and the retry runs
	case codes.Internal, codes.Unknown, codes.DataLoss, codes.Unimplemented:
		return *s.cfg.StoreServerErrors
	}
	return true
}

func (s *server) release(ctx context.Context, k idem.Key, token uint64) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if err := s.cfg.Store.Release(rctx, k, token); err != nil {
		// The lease runs out anyway; until then a retry is told the key is in progress.
		s.cfg.Logger.WarnContext(ctx, "idem: releasing the key failed", "key", k.String(), "err", err)
	}
}

// wait polls with try while the key is in progress and Config.Wait has not run
// out, or until the caller leaves.
func (s *server) wait(ctx context.Context, res idem.Result, try func() (idem.Result, error)) (idem.Result, error) {
	return wait.While(ctx, s.cfg.Wait, res, func(r idem.Result) bool { return r.Outcome == idem.InProgress }, try)
}

// answerDuplicate answers a claim that was not acquired: the replay, in progress
// or reused.
func (s *server) answerDuplicate(ctx context.Context, mi *methodInfo, k idem.Key, res idem.Result) (any, metrics.HTTPOutcome, error) {
	switch res.Outcome {
	case idem.Replayed:
		return s.replay(ctx, mi, k, res.Record.Result)
	case idem.Mismatch:
		return nil, metrics.HTTPMismatch, statusf(codes.FailedPrecondition, ReasonKeyReused, nil,
			"idem: idempotency key %s was already used for a different call (the method, the request message or a fingerprinted metadata value differ) than this call to %s: use a new key for a new request", keyDesc(k), mi.name)
	}
	d := min(max(time.Until(res.Record.ExpiresAt), 10*time.Millisecond), maxInProgressPushback)
	pushback(ctx, d)
	return nil, metrics.HTTPConflict, statusf(codes.Unavailable, ReasonKeyInProgress, &d,
		"idem: a call with idempotency key %s is still running: retry with the same key after the pushback (%v) to get its result", keyDesc(k), d)
}

// replay answers a call with the result stored for its key.
func (s *server) replay(ctx context.Context, mi *methodInfo, k idem.Key, b []byte) (any, metrics.HTTPOutcome, error) {
	st, err := decodeStored(b)
	if tl, ok := errors.AsType[*tooLarge](err); ok {
		return nil, metrics.HTTPReplayed, statusf(codes.Internal, ReasonNotStored, nil,
			"idem: the call with idempotency key %s was run and answered %s, but its result (%d bytes) could not be stored for replay (over Config.MaxResponseBytes, or not a protobuf message), so it is not run again: use a new key only to run a new request", keyDesc(k), codes.Code(tl.code), tl.size)
	}
	if err != nil {
		return nil, metrics.HTTPError, s.corrupt(ctx, mi, k, err)
	}
	header := st.header.Copy()
	if header == nil {
		header = metadata.MD{}
	}
	header.Set(MetadataReplayed, "true")
	_ = grpc.SetHeader(ctx, header)
	if len(st.trailer) > 0 {
		_ = grpc.SetTrailer(ctx, st.trailer)
	}
	if st.status != nil {
		var sp spb.Status
		if err := proto.Unmarshal(st.status, &sp); err != nil {
			return nil, metrics.HTTPError, s.corrupt(ctx, mi, k, err)
		}
		return nil, metrics.HTTPReplayed, status.ErrorProto(&sp)
	}
	mt, err := mi.responseType(s.cfg)
	if err != nil {
		s.cfg.Logger.ErrorContext(ctx, "idem: a stored response cannot be replayed", "method", mi.name, "key", k.String(), "err", err)
		return nil, metrics.HTTPError, statusf(codes.Internal, ReasonCorruptRecord, nil,
			"idem: the response stored for idempotency key %s cannot be replayed: %v", keyDesc(k), err)
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(st.response, m); err != nil {
		return nil, metrics.HTTPError, s.corrupt(ctx, mi, k, err)
	}
	return m, metrics.HTTPReplayed, nil
}

func (s *server) corrupt(ctx context.Context, mi *methodInfo, k idem.Key, err error) error {
	s.cfg.Logger.ErrorContext(ctx, "idem: a stored result could not be replayed", "method", mi.name, "key", k.String(), "err", err)
	return statusf(codes.Internal, ReasonCorruptRecord, nil,
		"idem: the result stored for idempotency key %s could not be decoded; it will not be replayed", keyDesc(k))
}

// storeFailed answers a failed claim without running the handler: InvalidArgument
// for input the store refused (a scope too long), Unavailable otherwise.
func (s *server) storeFailed(ctx context.Context, op string, k idem.Key, err error) error {
	if ie, ok := errors.AsType[*idem.InputError](err); ok {
		return statusf(codes.InvalidArgument, ReasonInvalidScope, nil, "%v", ie)
	}
	if ctx.Err() == nil {
		s.cfg.Logger.WarnContext(ctx, "idem: the idempotency store failed; answered Unavailable without running the handler",
			"op", op, "key", k.String(), "err", err)
	}
	pushback(ctx, storeRetryAfter)
	return statusf(codes.Unavailable, ReasonStoreUnavailable, ptr(storeRetryAfter),
		"idem: the idempotency store could not be reached, so the call was not run: retry with the same key after the pushback")
}

// methodInfo is what the interceptor knows of one method: whether it applies, and
// the type of its response, to replay one.
type methodInfo struct {
	name    string
	applies bool
	desc    protoreflect.MethodDescriptor // nil when not in Config.Files
	out     atomic.Pointer[protoreflect.MessageType]
}

// method returns the methodInfo of a full method name, resolving it once.
func (s *server) method(full string) *methodInfo {
	if v, ok := s.info.Load(full); ok {
		return v.(*methodInfo)
	}
	mi := &methodInfo{name: full, desc: findMethod(s.cfg, full)}
	if s.methods != nil {
		mi.applies = s.methods[full]
	} else {
		mi.applies = !readOnly(mi.desc)
	}
	v, _ := s.info.LoadOrStore(full, mi)
	return v.(*methodInfo)
}

// findMethod returns the descriptor of the full method name "/pkg.Service/Method",
// or nil.
func findMethod(cfg Config, full string) protoreflect.MethodDescriptor {
	svc, name, ok := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	if !ok {
		return nil
	}
	d, err := cfg.Files.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil
	}
	return sd.Methods().ByName(protoreflect.Name(name))
}

// readOnly reports whether a method declares it has no side effects.
func readOnly(md protoreflect.MethodDescriptor) bool {
	if md == nil {
		return false
	}
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	return ok && opts.GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS
}

// learn remembers the type of a response the handler returned.
func (mi *methodInfo) learn(m proto.Message) {
	if mi.out.Load() == nil {
		t := m.ProtoReflect().Type()
		mi.out.Store(&t)
	}
}

// responseType returns the type of the method's response: the one its handler
// returned in this process, else the registered type of its descriptor's output,
// else a dynamic message of that descriptor.
func (mi *methodInfo) responseType(cfg Config) (protoreflect.MessageType, error) {
	if t := mi.out.Load(); t != nil {
		return *t, nil
	}
	if mi.desc == nil {
		return nil, fmt.Errorf("method %s is not in Config.Files (protoregistry.GlobalFiles by default): import its generated package, or set Config.Files and Config.Types", mi.name)
	}
	out := mi.desc.Output()
	if t, err := cfg.Types.FindMessageByName(out.FullName()); err == nil {
		mi.out.Store(&t)
		return t, nil
	}
	t := protoreflect.MessageType(dynamicpb.NewMessageType(out))
	mi.out.Store(&t)
	return t, nil
}

// heldStream is the grpc.ServerTransportStream a handler runs with: it holds the
// headers and trailers the handler sets, to store them with its result, and
// hands them to the call's stream once the result is decided. A handler's
// SendHeader is held too: a unary response's headers go out with it anyway.
type heldStream struct {
	inner   grpc.ServerTransportStream
	mu      sync.Mutex
	header  metadata.MD
	trailer metadata.MD
}

func (h *heldStream) Method() string {
	if h.inner == nil {
		return ""
	}
	return h.inner.Method()
}

func (h *heldStream) SetHeader(md metadata.MD) error {
	h.mu.Lock()
	h.header = metadata.Join(h.header, md)
	h.mu.Unlock()
	return nil
}

func (h *heldStream) SendHeader(md metadata.MD) error { return h.SetHeader(md) }

func (h *heldStream) SetTrailer(md metadata.MD) error {
	h.mu.Lock()
	h.trailer = metadata.Join(h.trailer, md)
	h.mu.Unlock()
	return nil
}

func (h *heldStream) metadata() (header, trailer metadata.MD) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.header, h.trailer
}

// flush hands the held headers and trailers to the call's stream.
func (h *heldStream) flush() {
	header, trailer := h.metadata()
	if h.inner == nil {
		return
	}
	if len(header) > 0 {
		_ = h.inner.SetHeader(header)
	}
	if len(trailer) > 0 {
		_ = h.inner.SetTrailer(trailer)
	}
}

func ptr[T any](v T) *T { return &v }
