package natsserver

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// DefaultReadyTimeout bounds how long StartServer waits for the embedded server to
// accept connections; recovering a large file store can take a while.
const DefaultReadyTimeout = 30 * time.Second

// embeddedMaxPayload lets the embedded server carry idem.MaxPayload bytes of payload
// plus headers (NATS's default is 1 MiB). The server logs a notice above 8 MiB.
const embeddedMaxPayload = idem.MaxPayload + 64<<10

// ServerConfig configures an embedded NATS server with JetStream: the broker of
// idem's default setup (idem verify), in the same process as the application.
type ServerConfig struct {
	// Dir is the JetStream file store directory; messages and consumers in it survive
	// a restart of the server on the same Dir. Required. It must not be shared with
	// another running server.
	Dir string
	// Host is the interface the server listens on. Empty means 127.0.0.1, so the
	// default setup is not reachable from other machines.
	Host string
	// Port is the client port. 0 or -1 picks a free port (see Server.ClientURL).
	Port int
	// MaxStore caps the bytes of JetStream file storage. 0 means the server's
	// default (75% of the free disk space).
	MaxStore int64
	// ReadyTimeout bounds the wait for the server to accept connections. 0 means
	// DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Logger, if set, receives the server's notices, warnings and errors.
	Logger *slog.Logger
	// SyncInterval is how often JetStream syncs its file store to disk. Zero, the
	// default, syncs every write before the server acknowledges it (nats-server's
	// sync_interval: always), so a PubAck, and the outbox row marked published on
	// it, means on this machine's disk. A positive interval is nats-server's own
	// behaviour (its default is 2 minutes): the ack comes at once, and a power loss
	// or kernel crash loses what was acknowledged since the last sync (a crash of
	// the process alone loses nothing: the kernel holds the writes). Faster; see
	// the package documentation for the cost. Negative is invalid.
	SyncInterval time.Duration
}

func (cfg ServerConfig) withDefaults() (ServerConfig, error) {
	cfg.Host = cmp.Or(cfg.Host, "127.0.0.1")
	cfg.Port = cmp.Or(cfg.Port, server.RANDOM_PORT)
	cfg.ReadyTimeout = cmp.Or(cfg.ReadyTimeout, DefaultReadyTimeout)
	switch {
	case cfg.Dir == "":
		return cfg, &idem.InputError{Field: "ServerConfig.Dir", Reason: "is empty",
			Fix: "set the directory JetStream stores messages in, such as \"./data/nats\""}
	case cfg.Port < -1 || cfg.Port > 65535:
		return cfg, &idem.InputError{Field: "ServerConfig.Port", Reason: fmt.Sprintf("is outside -1..65535 (got %d)", cfg.Port),
			Fix: "use 0 for a free port, or 4222"}
	}
	if err := checkNode("ServerConfig", cfg.MaxStore, cfg.ReadyTimeout); err != nil {
		return cfg, err
	}
	if cfg.SyncInterval < 0 {
		return cfg, &idem.InputError{Field: "ServerConfig.SyncInterval", Reason: fmt.Sprintf("is negative (got %v)", cfg.SyncInterval),
			Fix: "use 0 to sync every write before its ack, or a positive interval (such as 2m, nats-server's default) to sync in the background"}
	}
	return cfg, nil
}

// checkNode checks the settings ServerConfig and ClusterConfig (kind) share: a
// node's store cap and the ready timeout.
func checkNode(kind string, maxStore int64, readyTimeout time.Duration) error {
	switch {
	case maxStore < 0:
		return &idem.InputError{Field: kind + ".MaxStore", Reason: fmt.Sprintf("is negative (got %d)", maxStore),
			Fix: "use 0 for the server's default, or a size in bytes"}
	case readyTimeout < 0:
		return &idem.InputError{Field: kind + ".ReadyTimeout", Reason: fmt.Sprintf("is negative (got %v)", readyTimeout),
			Fix: "use 0 for 30s"}
	}
	return nil
}

// Server is an embedded NATS server with JetStream on a file store.
type Server struct {
	ns *server.Server
}

// StartServer starts an embedded NATS server with JetStream storing in cfg.Dir and
// returns once it accepts connections. Unless cfg.SyncInterval says otherwise, it
// syncs each write to disk before acknowledging it. The caller must call Shutdown.
func StartServer(cfg ServerConfig) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ns, err := server.NewServer(&server.Options{
		Host:              cfg.Host,
		Port:              cfg.Port,
		JetStream:         true,
		StoreDir:          cfg.Dir,
		JetStreamMaxStore: cfg.MaxStore,
		MaxPayload:        embeddedMaxPayload,
		NoSigs:            true,
		SyncAlways:        cfg.SyncInterval == 0,
		SyncInterval:      cfg.SyncInterval, // 0: the server's default, unused while SyncAlways
	})
	if err != nil {
		return nil, &idem.BackendError{Backend: backend, Op: "start server", Err: err}
	}
	logs := &serverLog{log: cfg.Logger}
	ns.SetLoggerV2(logs, false, false, false)
	ns.Start()
	if !ready(ns, logs, cfg.ReadyTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		why := logs.fatal()
		if why == "" {
			why = fmt.Sprintf("not ready with JetStream within %v", cfg.ReadyTimeout)
		}
		addr := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
		if cfg.Port == server.RANDOM_PORT {
			addr = cfg.Host + " (a free port)"
		}
		return nil, &idem.BackendError{Backend: backend, Op: "start server",
			Err: fmt.Errorf("on %s, store %q: %s", addr, cfg.Dir, why)}
	}
	return &Server{ns: ns}, nil
}

// ready waits until ns accepts connections with JetStream on, or stops early when
// the server reported a fatal error (it then never becomes ready).
func ready(ns *server.Server, logs *serverLog, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if ns.ReadyForConnections(100*time.Millisecond) && ns.JetStreamEnabled() {
			return true
		}
		if logs.fatal() != "" || time.Now().After(deadline) {
			return false
		}
	}
}

// ClientURL is the URL clients connect to, such as nats://127.0.0.1:40123.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Connect opens a client connection to the server in process, without TCP: the
// cheapest connection for the application that embeds the server.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect(s.ClientURL(), append([]nats.Option{nats.InProcessServer(s.ns)}, opts...)...)
	if err != nil {
		return nil, &idem.BackendError{Backend: backend, Op: "connect", Err: err}
	}
	return nc, nil
}

// Shutdown stops the server and returns once it has stopped and flushed its
// store, so a new server can start on the same Dir. Calling it again does nothing.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// serverLog adapts the server's logger to slog and keeps the first fatal error,
// which StartServer reports (the server logs it instead of returning it).
type serverLog struct {
	log *slog.Logger

	mu    sync.Mutex
	first string
}

func (l *serverLog) fatal() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first
}

func (l *serverLog) emit(level slog.Level, format string, v []any) {
	if l.log != nil && l.log.Enabled(context.Background(), level) {
		l.log.Log(context.Background(), level, fmt.Sprintf(format, v...), "component", "nats-server")
	}
}

// Noticef logs a server notice at Info.
func (l *serverLog) Noticef(format string, v ...any) { l.emit(slog.LevelInfo, format, v) }

// Warnf logs a server warning at Warn.
func (l *serverLog) Warnf(format string, v ...any) { l.emit(slog.LevelWarn, format, v) }

// Errorf logs a server error at Error.
func (l *serverLog) Errorf(format string, v ...any) { l.emit(slog.LevelError, format, v) }

// Debugf logs a server debug line at Debug (only if the server's debug is on).
func (l *serverLog) Debugf(format string, v ...any) { l.emit(slog.LevelDebug, format, v) }

// Tracef logs a protocol trace at Debug (only if the server's trace is on).
func (l *serverLog) Tracef(format string, v ...any) { l.emit(slog.LevelDebug, format, v) }

// Fatalf records why the server cannot run and logs it at Error; unlike the
// server's own logger it never exits the process.
func (l *serverLog) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	if l.first == "" {
		l.first = msg
	}
	l.mu.Unlock()
	l.emit(slog.LevelError, "%s", []any{msg})
}

var _ server.Logger = (*serverLog)(nil)
