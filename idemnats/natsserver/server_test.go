package natsserver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats/natsserver"
)

// TestServerSyncsBeforeAck: by default the embedded server syncs every write to
// disk before it acknowledges it (sync_interval: always), so an ack means stored.
func TestServerSyncsBeforeAck(t *testing.T) {
	t.Parallel()
	srv, err := natsserver.StartServer(natsserver.ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if always, every := natsserver.JetStreamSync(srv); !always {
		t.Fatalf("the embedded server syncs every %s, acknowledging writes not yet on disk; want sync always", every)
	}
}

// TestServerSyncInterval: a SyncInterval turns syncing before each ack off, for
// nats-server's periodic sync at that interval.
func TestServerSyncInterval(t *testing.T) {
	t.Parallel()
	for _, interval := range []time.Duration{2 * time.Minute, 10 * time.Second} {
		srv, err := natsserver.StartServer(natsserver.ServerConfig{Dir: t.TempDir(), SyncInterval: interval})
		if err != nil {
			t.Fatal(err)
		}
		always, every := natsserver.JetStreamSync(srv)
		srv.Shutdown()
		if always || every != interval.String() {
			t.Errorf("StartServer with SyncInterval %v: JetStream syncs always=%v every %s, want every %v", interval, always, every, interval)
		}
	}
}

func TestServerConfig(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		cfg   natsserver.ServerConfig
		field string
	}{
		"no dir":         {natsserver.ServerConfig{}, "ServerConfig.Dir"},
		"port too large": {natsserver.ServerConfig{Dir: t.TempDir(), Port: 70000}, "ServerConfig.Port"},
		"port -2":        {natsserver.ServerConfig{Dir: t.TempDir(), Port: -2}, "ServerConfig.Port"},
		"negative store": {natsserver.ServerConfig{Dir: t.TempDir(), MaxStore: -1}, "ServerConfig.MaxStore"},
		"negative sync":  {natsserver.ServerConfig{Dir: t.TempDir(), SyncInterval: -time.Second}, "ServerConfig.SyncInterval"},
	} {
		if _, err := natsserver.StartServer(tc.cfg); !errors.Is(err, idem.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: StartServer = %v, want idem.ErrInvalid naming %s", name, err, tc.field)
		}
	}
	// A store directory that cannot be created is reported, not logged and ignored.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := natsserver.StartServer(natsserver.ServerConfig{Dir: filepath.Join(file, "store")})
	var be *idem.BackendError
	if !errors.As(err, &be) {
		if srv != nil {
			srv.Shutdown()
		}
		t.Fatalf("StartServer with a file as the store's parent = %v, want *idem.BackendError", err)
	}
}

func TestClusterConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		cfg   natsserver.ClusterConfig
		field string
	}{
		{natsserver.ClusterConfig{}, "Dir"},
		{natsserver.ClusterConfig{Dir: "x", Nodes: 1}, "Nodes"},
		{natsserver.ClusterConfig{Dir: "x", Nodes: 100}, "Nodes"},
		{natsserver.ClusterConfig{Dir: "x", Name: "a.b"}, "Name"},
		{natsserver.ClusterConfig{Dir: "x", MaxStore: -1}, "MaxStore"},
		{natsserver.ClusterConfig{Dir: "x", ReadyTimeout: -time.Second}, "ReadyTimeout"},
	} {
		if _, err := natsserver.StartCluster(ctx, tc.cfg); !errors.Is(err, idem.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("StartCluster(%+v) = %v, want idem.ErrInvalid naming %s", tc.cfg, err, tc.field)
		}
	}
}
