package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for --postgres
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemnats/natsserver"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/outbox"
)

// Config is what the service runs on. The zero value runs on the embedded
// defaults: SQLite and NATS in a temporary directory, the API on 127.0.0.1:8080.
type Config struct {
	Addr     string // the API's listen address; default 127.0.0.1:8080
	SQLite   string // SQLite file; default a new one in a temporary directory
	Postgres string // Postgres URL; when set, used instead of SQLite
	NATS     string // NATS server URL; default an embedded server
	Stream   string // JetStream stream; default ORDERS
	Subject  string // subject of the order events; default orders.placed
	// AckWait is how long JetStream waits for the consumer's ack before it
	// redelivers a message; default idemnats.DefaultAckWait.
	AckWait time.Duration
	// DemoFaults loses the consumer's first ack and the payment API's first
	// response, as a network would, so that the demo shows the duplicates they
	// cause being absorbed.
	DemoFaults bool
	Logger     *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8080"
	}
	if c.Stream == "" {
		c.Stream = "ORDERS"
	}
	if c.Subject == "" {
		c.Subject = "orders.placed"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// App is the running service: its database, broker, API and workers.
type App struct {
	cfg      Config
	db       *sql.DB
	txdb     idemsql.TxDB[*sql.Tx]
	store    idem.TxStore[*sql.Tx] // the HTTP keys and the inbox's message keys
	outbox   *outbox.Outbox[*sql.Tx]
	fence    *effect.Fence[*sql.Tx]
	js       jetstream.JetStream
	api      *http.Server
	apiLn    net.Listener
	payments *paymentAPI
	faults   *faults
	dbName   string
	natsName string
	closers  []func() // in reverse order by Close
}

// Open opens the database and the broker, creates the tables and the stream, and
// starts listening; Run then serves.
func Open(ctx context.Context, cfg Config) (_ *App, err error) {
	a := &App{cfg: cfg.withDefaults()}
	a.faults = &faults{on: cfg.DemoFaults, ackWait: cmp.Or(a.cfg.AckWait, idemnats.DefaultAckWait)}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if err := a.openDB(ctx); err != nil {
		return nil, err
	}
	if err := a.openNATS(ctx); err != nil {
		return nil, err
	}
	if a.outbox, err = outbox.New(ctx, a.txdb, outbox.Config{}); err != nil {
		return nil, err
	}
	if a.fence, err = effect.New(ctx, a.txdb, effect.Config{Logger: a.cfg.Logger}); err != nil {
		return nil, err
	}
	if a.payments, err = startPaymentAPI(); err != nil {
		return nil, err
	}
	a.closers = append(a.closers, a.payments.close)
	return a, a.listen()
}

// openDB opens Postgres when a URL is given, else SQLite, with idem's key store
// on the same database, so that keys commit with the effects they guard.
func (a *App) openDB(ctx context.Context) error {
	if a.cfg.Postgres != "" {
		db, err := sql.Open("pgx", a.cfg.Postgres)
		if err != nil {
			return fmt.Errorf("--postgres: %w", err)
		}
		a.closers = append(a.closers, func() { db.Close() })
		db.SetMaxOpenConns(16)
		store, err := idempg.NewSQL(ctx, db, idempg.Config{})
		if err != nil {
			return fmt.Errorf("--postgres: %w", err)
		}
		a.db, a.store, a.dbName = db, store, "postgres"
	} else {
		path := a.cfg.SQLite
		if path == "" {
			dir, err := os.MkdirTemp("", "idem-orders-")
			if err != nil {
				return err
			}
			a.closers = append(a.closers, func() { os.RemoveAll(dir) })
			path = filepath.Join(dir, "orders.db")
		}
		store, err := idemsqlite.Open(ctx, path, idemsqlite.Config{})
		if err != nil {
			return fmt.Errorf("--sqlite %s: %w", path, err)
		}
		a.closers = append(a.closers, func() { store.Close() })
		a.db, a.store, a.dbName = store.DB(), store, "sqlite "+path
	}
	txdb, err := idemsql.SQLDB(ctx, a.db)
	if err != nil {
		return err
	}
	a.txdb = txdb
	return createTables(ctx, a.db)
}

// openNATS connects to the NATS server given, or starts one in a temporary
// directory, and creates the stream (or updates it to the config).
func (a *App) openNATS(ctx context.Context) error {
	url := a.cfg.NATS
	a.natsName = redactURL(url)
	if url == "" {
		dir, err := os.MkdirTemp("", "idem-orders-nats-")
		if err != nil {
			return err
		}
		a.closers = append(a.closers, func() { os.RemoveAll(dir) })
		srv, err := natsserver.StartServer(natsserver.ServerConfig{Dir: dir})
		if err != nil {
			return fmt.Errorf("start the embedded NATS server: %w", err)
		}
		a.closers = append(a.closers, srv.Shutdown)
		url = srv.ClientURL()
		a.natsName = "embedded, " + url
	}
	nc, err := nats.Connect(url, nats.Name("idem orders example"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("--nats %s: %w", redactURL(url), err)
	}
	a.closers = append(a.closers, nc.Close)
	if a.js, err = jetstream.New(nc); err != nil {
		return err
	}
	_, err = idemnats.EnsureStream(ctx, a.js, idemnats.StreamConfig{Name: a.cfg.Stream, Subjects: []string{a.cfg.Subject}})
	if err != nil {
		return fmt.Errorf("--stream %s: %w", a.cfg.Stream, err)
	}
	return nil
}

func (a *App) listen() error {
	h, err := a.handler()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", a.cfg.Addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w (pick another port, e.g. --addr 127.0.0.1:8081)", a.cfg.Addr, err)
	}
	a.apiLn = ln
	a.api = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(a.cfg.Logger.Handler(), slog.LevelWarn)}
	return nil
}

// Run serves the API and runs the relay, the consumer and the payment worker
// until ctx ends.
func (a *App) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	relay, err := a.relay()
	if err != nil {
		return err
	}
	consumer, err := a.consumer(ctx)
	if err != nil {
		return err
	}
	parts := map[string]func(context.Context) error{
		"api":      a.serve,
		"relay":    relay.Run,
		"consumer": consumer.Run,
		"payments": a.payOrders,
	}
	errs := make(chan error, len(parts))
	var wg sync.WaitGroup
	for name, run := range parts {
		wg.Go(func() {
			if err := run(ctx); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel() // one part down stops the service: a supervisor restarts it
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

func (a *App) serve(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.api.Shutdown(sctx)
	}()
	if err := a.api.Serve(a.apiLn); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// relay publishes the outbox to JetStream; the stream's dedup window drops a
// message the relay publishes twice (after a crash between the publish and
// marking the row published).
func (a *App) relay() (*outbox.Relay[*sql.Tx], error) {
	sink, err := idemnats.NewSink(a.js, idemnats.SinkConfig{})
	if err != nil {
		return nil, err
	}
	return a.outbox.Relay(sink, outbox.RelayConfig{PollInterval: 200 * time.Millisecond, Logger: a.cfg.Logger})
}

// consumer reads the stream through the inbox, which applies each message once.
func (a *App) consumer(ctx context.Context) (*inbox.Consumer[*sql.Tx], error) {
	src, err := idemnats.NewSource(ctx, a.js, idemnats.SourceConfig{Stream: a.cfg.Stream, Durable: "ledger", AckWait: a.cfg.AckWait})
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func() { src.Close() })
	return inbox.New(ctx, a.faults.source(src), a.txdb, a.store, a.applyOrder, inbox.Config{Consumer: "ledger", Logger: a.cfg.Logger})
}

// URL is the API's base URL.
func (a *App) URL() string { return "http://" + a.apiLn.Addr().String() }

// DBName and NATSName say what the service runs on.
func (a *App) DBName() string   { return a.dbName }
func (a *App) NATSName() string { return a.natsName }

// Close releases what Open opened. Call it after Run has returned.
func (a *App) Close() {
	if a.apiLn != nil {
		a.apiLn.Close()
	}
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

// redactURL is raw without its credentials (a password, or a NATS token in the
// user part), for messages and logs.
func redactURL(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	if u.User != nil {
		u.User = neturl.User("REDACTED")
	}
	return u.String()
}

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}
