package testsvc

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// pgbouncerBin is where Debian's package puts PgBouncer (scripts/services.sh
// installs it).
const pgbouncerBin = "/usr/sbin/pgbouncer"

// PgBouncer starts a private PgBouncer in transaction pooling (pool_mode =
// transaction, as many production deployments run it) in front of the Postgres of
// upstream, a postgres:// URL, and returns upstream's URL with its host and port
// replaced by the pooler's. It listens on a free loopback port, admits every user
// of upstream without a password (auth_type = trust) and routes any database name
// to upstream's server; it is stopped when t ends.
//
// PgBouncer refuses startup parameters other than a few (application_name,
// client_encoding, DateStyle, TimeZone, …): a URL with search_path is refused at
// connect. Use a fresh database (PostgresDatabase) rather than a schema.
//
// Without the pgbouncer binary the test skips, or fails under IDEM_REQUIRE_SERVICES=1.
func PgBouncer(t testing.TB, upstream string) string {
	t.Helper()
	if _, err := os.Stat(pgbouncerBin); err != nil {
		msg := fmt.Sprintf("pgbouncer: %v; install it with `make services` (apt-get install -y pgbouncer)", err)
		if Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatalf("pgbouncer upstream %q: %v", upstream, err)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "5432"
	}
	user := u.User.Username()
	// A directory of its own that the postgres OS user can read: PgBouncer refuses
	// to run as root and is told to switch to postgres (-u) when we are root.
	dir, err := os.MkdirTemp("", "idem-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	listen := freePort(t)
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
pool_mode = transaction
auth_type = trust
auth_file = %s
pidfile =
logfile =
max_client_conn = 500
default_pool_size = 20
server_lifetime = 3600
`, host, port, listen, filepath.Join(dir, "users.txt"))
	users := fmt.Sprintf("\"root\" \"\"\n\"postgres\" \"\"\n\"%s\" \"\"\n", user)
	for name, body := range map[string]string{"pgbouncer.ini": ini, "users.txt": users} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	if os.Geteuid() == 0 {
		args = append([]string{"-u", "postgres"}, args...)
	}
	cmd := exec.Command(pgbouncerBin, args...)
	var log Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt) // SIGINT: safe shutdown
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(listen))
	// Wait until it answers: it is up once it accepts a connection (bounded, in
	// case it cannot start).
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("pgbouncer exited at start (%v):\n%s", err, strings.TrimSpace(log.String()))
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer did not listen on %s within 20s:\n%s", addr, strings.TrimSpace(log.String()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgbouncer log:\n%s", strings.TrimSpace(log.String()))
		}
	})
	u.Host = addr
	return u.String()
}

// freePort returns a loopback TCP port nothing listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
