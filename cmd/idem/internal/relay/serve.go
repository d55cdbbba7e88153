package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Serving is how Serve runs a relay: idem relay's flags.
type Serving struct {
	Listen string        // --listen: /metrics, /healthz (and the API); "" for none
	API    bool          // --admin-token: handler serves /api/ and the console too
	Batch  int           // --batch, for the start line
	Poll   time.Duration // --poll: the database is pinged as often
	Stderr io.Writer     // the start and stop lines
}

// Serve runs the relay (run), the database pinger (ping, into h) and the HTTP server
// of handler until ctx ends or the server fails. what names the relay's database and
// sink in its start line.
func Serve(ctx context.Context, o Serving, h *Health, handler http.Handler,
	run, ping func(context.Context) error, what string) error {
	srvErr := make(chan error, 1)
	srv, err := o.listen(handler, srvErr)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Stderr, "idem relay: relaying %s (batch %d, poll %v)\n", what, o.Batch, o.Poll)

	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { h.PingEvery(rctx, o.Poll, ping) })
	relayErr := make(chan error, 1)
	go func() { relayErr <- run(rctx) }()

	select {
	case <-ctx.Done():
		err = <-relayErr
	case err = <-srvErr:
		stop()
		<-relayErr
	case err = <-relayErr:
	}
	stop()
	wg.Wait()
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = nil // a requested stop
	}
	if err == nil {
		fmt.Fprintln(o.Stderr, "idem relay: stopped")
	}
	return err
}

// listen serves handler on --listen in the background, if set (else srv is nil); a
// failure of Serve lands on srvErr.
func (o Serving) listen(handler http.Handler, srvErr chan<- error) (srv *http.Server, err error) {
	if o.Listen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", o.Listen, err)
	}
	srv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			srvErr <- fmt.Errorf("--listen %s: %w", o.Listen, err)
		}
	}()
	served := "/metrics, /healthz"
	if o.API {
		served += ", /api/ and the console at /"
	}
	fmt.Fprintf(o.Stderr, "idem relay: listening on %s (%s)\n", ln.Addr(), served)
	return srv, nil
}
