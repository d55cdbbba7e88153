// Command orders is a small order service that makes every effect of an order
// happen exactly once, from the client's POST to the charge at the payment
// provider:
//
//	client --POST /orders--> API --one tx--> orders + outbox --relay--> NATS JetStream
//	       --inbox: one tx--> ledger + payment due --effect fence--> payment API
//
// Each arrow has its mechanism:
//
//   - the API sits behind idemhttp.AtomicMiddleware: a retried POST with the same
//     Idempotency-Key gets the stored response, and the order row, the outbox row
//     and the key's record commit in one transaction (api.go);
//   - an outbox.Relay publishes the outbox to JetStream (app.go);
//   - an inbox consumer applies each order to the ledger with the message's key in
//     the same transaction, so a redelivered message is acknowledged and counted,
//     not applied again (ledger.go);
//   - a payment worker charges each applied order through an effect.Fence, sending
//     the fence's derived key as the Idempotency-Key to the payment API, so a
//     retried charge is charged once (payments.go).
//
// With no flags it runs on the embedded defaults: SQLite in a temporary directory
// and an in-process NATS server, everything on loopback:
//
//	go run ./examples/orders            # serve, and print how to curl it
//	go run ./examples/orders --demo     # place a few orders, with duplicates, and check them
//
// On Postgres and a NATS server:
//
//	go run ./examples/orders --demo --postgres 'postgres://user@127.0.0.1:5432/db' --nats nats://127.0.0.1:4222
//
// It creates its tables (orders, ledger, payments) and idem's own in the database's
// search_path, and the stream ORDERS (--stream, --subject) on the NATS server: give
// it a scratch database or schema (postgres://…/db?search_path=scratch).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

// run parses args, starts the service and serves until ctx ends, or, with
// --demo, places the demo's orders, prints what happened to them and returns.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:8080", "the API's listen address (loopback by default)")
	fs.StringVar(&cfg.SQLite, "sqlite", "", "SQLite file to use (default: a new one in a temporary directory, removed at exit)")
	fs.StringVar(&cfg.Postgres, "postgres", "", "Postgres URL (postgres://user@host:5432/db) to use instead of SQLite")
	fs.StringVar(&cfg.NATS, "nats", "", "NATS server URL (nats://host:4222); default: an embedded server in a temporary directory")
	fs.StringVar(&cfg.Stream, "stream", "ORDERS", "the JetStream stream the orders go to")
	fs.StringVar(&cfg.Subject, "subject", "orders.placed", "the subject of the order events")
	fs.DurationVar(&cfg.AckWait, "ack-wait", 0, "how long JetStream waits for an ack before it redelivers (default 30s; the demo uses 2s)")
	demo := fs.Bool("demo", false, "place a few orders (with a retried POST, a lost ack and a lost payment response), check each was charged once, and exit")
	timeout := fs.Duration("timeout", 2*time.Minute, "with --demo: how long to wait for the orders to be charged")
	verbose := fs.Bool("v", false, "log at debug level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: every option is a flag (see -h)", fs.Arg(0))
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if *demo {
		addrSet := false
		fs.Visit(func(f *flag.Flag) { addrSet = addrSet || f.Name == "addr" })
		if !addrSet {
			cfg.Addr = "127.0.0.1:0" // any free port: the demo is its own client
		}
		if cfg.AckWait == 0 {
			cfg.AckWait = 2 * time.Second // the lost ack's redelivery comes quickly
		}
		cfg.DemoFaults = true
	}

	app, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer app.Close()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx) }()

	if !*demo {
		printUsage(stdout, app)
		return <-done
	}
	dctx, dcancel := context.WithTimeout(runCtx, *timeout)
	defer dcancel()
	rep, err := Demo(dctx, app, stdout)
	cancel()
	if rerr := <-done; err == nil {
		err = rerr
	}
	if err != nil {
		return err
	}
	return rep.Check()
}

func printUsage(w io.Writer, app *App) {
	fmt.Fprintf(w, "orders: serving on %s (database: %s; NATS: %s)\n\n", app.URL(), app.DBName(), app.NATSName())
	fmt.Fprintf(w, "Place an order (send it again with the same key: the same order comes back):\n\n")
	fmt.Fprintf(w, "  curl -i -H 'Idempotency-Key: k1' -d '{\"customer\":\"ada\",\"amount\":1200}' %s/orders\n\n", app.URL())
	fmt.Fprintf(w, "Then see it applied to the ledger and charged:\n\n")
	fmt.Fprintf(w, "  curl %s/orders/ORDER_ID\n\n", app.URL())
	fmt.Fprintf(w, "Ctrl-C stops the service.\n")
}
