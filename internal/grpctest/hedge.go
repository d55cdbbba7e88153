package grpctest

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Hedge returns a client interceptor that hedges each unary call as gRFC A6's
// hedgingPolicy describes, because grpc-go does not implement that policy: in
// grpc-go v1.84 the service config's method config (jsonMC in service_config.go)
// has a RetryPolicy and no HedgingPolicy, and clientStream runs one attempt at a
// time (stream.go: "TODO(hedging): hedging will have multiple attempts
// simultaneously"). A service config with a hedgingPolicy is accepted and the
// policy silently ignored.
//
// The call is sent once, then again every delay until copies are out (all at
// once when delay is 0). The first copy answered OK or with a fatal status wins:
// its reply, headers and trailers are the call's, and the other copies are
// cancelled. A copy answered with a non-fatal status (UNAVAILABLE, A6's
// nonFatalStatusCodes as a service would configure them) lets the others go on
// and sends the next copy at once, or after the server's grpc-retry-pushback-ms
// (none after a negative pushback). When every copy failed non-fatally, the
// call fails with the last status. Retry throttling is not modelled.
//
// Chain it below idemgrpc.UnaryClientInterceptor, so that every copy carries the
// one key the key interceptor gave the call, as grpc-go's own retries would; and
// use it on a connection without a retryPolicy, as A6 allows one policy or the
// other per method.
func Hedge(copies int, delay time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		out, ok := reply.(proto.Message)
		if copies <= 1 || !ok {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // the copies still out are cancelled once one wins
		// Each copy gets its own reply and header and trailer destinations; the
		// caller's are filled from the winner only.
		var header, trailer *metadata.MD
		var rest []grpc.CallOption
		for _, o := range opts {
			switch o := o.(type) {
			case grpc.HeaderCallOption:
				header = o.HeaderAddr
			case grpc.TrailerCallOption:
				trailer = o.TrailerAddr
			default:
				rest = append(rest, o)
			}
		}
		type answer struct {
			reply           proto.Message
			header, trailer metadata.MD
			err             error
		}
		want := copies // lowered by a negative pushback
		answers := make(chan *answer, want)
		// The type is read here, once: a copy may start after the winner has
		// written the caller's reply.
		mt := out.ProtoReflect().Type()
		send := func() {
			a := &answer{reply: mt.New().Interface()}
			o := append(rest[:len(rest):len(rest)], grpc.Header(&a.header), grpc.Trailer(&a.trailer))
			a.err = invoker(ctx, method, req, a.reply, cc, o...)
			answers <- a
		}
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		defer timer.Stop()
		sent, answered := 0, 0
		launch := func() {
			go send()
			sent++
		}
		arm := func(d time.Duration) { // the next copy goes out after d
			if sent < want {
				timer.Reset(d)
			}
		}
		launch()
		if delay == 0 {
			for sent < want {
				launch()
			}
		}
		arm(delay)
		var last error
		// Until a copy wins or every copy is answered; while copies are left to
		// send, the timer is armed for the next.
		for answered < want {
			select {
			case <-timer.C:
				launch()
				arm(delay)
			case a := <-answers:
				answered++
				if a.err == nil || !nonFatal(a.err) {
					if header != nil {
						*header = a.header
					}
					if trailer != nil {
						*trailer = a.trailer
					}
					if a.err == nil {
						proto.Reset(out)
						proto.Merge(out, a.reply)
					}
					return a.err
				}
				last = a.err
				if sent < want {
					timer.Stop()
					switch p, ok := pushback(a.trailer); {
					case !ok: // A6: a non-fatal status sends the next copy at once
						launch()
						arm(delay)
					case p >= 0:
						arm(p)
					default:
						want = sent // the server asked for no more copies
					}
				}
			}
		}
		return last
	}
}

// nonFatal reports whether a copy's status lets the other copies go on.
func nonFatal(err error) bool { return status.Code(err) == codes.Unavailable }

// pushback reads the grpc-retry-pushback-ms trailer; ok is false without one.
func pushback(trailer metadata.MD) (time.Duration, bool) {
	vs := trailer.Get("grpc-retry-pushback-ms")
	if len(vs) != 1 {
		return 0, false
	}
	ms, err := strconv.ParseInt(vs[0], 10, 64)
	if err != nil {
		return -1, true
	}
	return time.Duration(ms) * time.Millisecond, true
}
