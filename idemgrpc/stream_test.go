package idemgrpc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemhq/idem/idemgrpc"
)

// watchDesc is a test-only service with one server-streaming method, written by
// hand: Watch answers its request twice.
var watchDesc = grpc.ServiceDesc{
	ServiceName: "idem.test.Watcher",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Watch",
		ServerStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			srv.(*watcher).runs.Add(1)
			var req wrapperspb.StringValue
			if err := ss.RecvMsg(&req); err != nil {
				return err
			}
			for range 2 {
				if err := ss.SendMsg(&req); err != nil {
					return err
				}
			}
			return nil
		},
	}},
}

type watcher struct{ runs atomic.Int64 }

// watch opens Watch on conn and returns the messages it received.
func watch(ctx context.Context, conn *grpc.ClientConn) ([]string, error) {
	s, err := conn.NewStream(ctx, &watchDesc.Streams[0], "/idem.test.Watcher/Watch")
	if err != nil {
		return nil, err
	}
	if err := s.SendMsg(wrapperspb.String("orders")); err != nil {
		return nil, err
	}
	if err := s.CloseSend(); err != nil {
		return nil, err
	}
	var got []string
	for {
		var m wrapperspb.StringValue
		if err := s.RecvMsg(&m); errors.Is(err, io.EOF) {
			return got, nil
		} else if err != nil {
			return got, err
		}
		got = append(got, m.GetValue())
	}
}

// A streaming call with a key is refused Unimplemented rather than run unguarded;
// one without passes through.
func TestStreamServerInterceptor(t *testing.T) {
	t.Parallel()
	srv := grpc.NewServer(grpc.StreamInterceptor(idemgrpc.StreamServerInterceptor()))
	w := &watcher{}
	srv.RegisterService(&watchDesc, w)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	conn := dialPlain(t, ln.Addr().String())

	got, err := watch(context.Background(), conn)
	if err != nil || !equal(got, []string{"orders", "orders"}) {
		t.Fatalf("unkeyed stream: %q %v", got, err)
	}
	_, err = watch(withKey(context.Background(), "k-1"), conn)
	wantStatus(t, err, codes.Unimplemented, idemgrpc.ReasonInvalidKey)
	if n := w.runs.Load(); n != 1 {
		t.Fatalf("the stream handler ran %d times, want once (the unkeyed stream)", n)
	}
}
