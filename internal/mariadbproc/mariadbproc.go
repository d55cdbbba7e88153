// Package mariadbproc starts a private MariaDB server in a temporary directory on a
// free loopback port, and kills and restarts it: what `idem verify --db mysql:
// --db-crash N` and the crash tests run against, so they own the server they kill.
//
// It runs the machine's MariaDB installation (mariadb-install-db and mariadbd, on
// PATH or in /usr/sbin and /usr/bin). The server's root user has no password and
// is reached over TCP on 127.0.0.1 only, like the shared test server. Commits are
// written to the redo log at every commit (innodb_flush_log_at_trx_commit=1), so a
// SIGKILL of the server loses no committed transaction: InnoDB's crash recovery
// replays the log when it starts again.
package mariadbproc

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Options configures Start. The zero value is usable.
type Options struct {
	// StartTimeout bounds the installation of the data directory plus the start,
	// and each Restart. Default 2 minutes.
	StartTimeout time.Duration
}

// Server is a running private MariaDB server. Stop it when done.
type Server struct {
	// URL is a mysql:// URL of its "mysql" database as root (no password), the
	// form idem's --db takes.
	URL string
	// DSN is the same for go-sql-driver/mysql.
	DSN  string
	Port int

	dir     string
	bin     string // mariadbd
	timeout time.Duration
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has exited
}

// Available reports why Start cannot run here, or nil.
func Available() error {
	_, _, err := binaries()
	return err
}

// Start installs a data directory into a new temporary directory and starts the
// server on it.
func Start(ctx context.Context, opt Options) (*Server, error) {
	if opt.StartTimeout <= 0 {
		opt.StartTimeout = 2 * time.Minute
	}
	install, server, err := binaries()
	if err != nil {
		return nil, err
	}
	ictx, cancel := context.WithTimeout(ctx, opt.StartTimeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "idem-mariadb-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: server, timeout: opt.StartTimeout}
	args := []string{"--no-defaults", "--datadir=" + filepath.Join(dir, "data"), "--auth-root-authentication-method=normal", "--skip-test-db"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	cmd := exec.CommandContext(ictx, install, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("mariadbproc: mariadb-install-db: %w\n%s", err, tail(out.Bytes()))
	}
	for attempt := 0; ; attempt++ {
		if s.Port, err = freePort(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		if err = s.start(ictx); err == nil {
			s.DSN = fmt.Sprintf("root@tcp(127.0.0.1:%d)/mysql", s.Port)
			s.URL = fmt.Sprintf("mysql://root@127.0.0.1:%d/mysql", s.Port)
			return s, nil
		}
		if attempt == 2 || ictx.Err() != nil { // a port taken between freePort and start is worth two retries
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

// start runs mariadbd on s's data directory and port and waits until it answers.
func (s *Server) start(ctx context.Context) error {
	args := []string{
		"--no-defaults",
		"--datadir=" + filepath.Join(s.dir, "data"),
		"--port=" + strconv.Itoa(s.Port),
		"--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(s.dir, "sock"),
		"--pid-file=" + filepath.Join(s.dir, "mariadbd.pid"),
		"--log-error=" + filepath.Join(s.dir, "error.log"),
		"--skip-name-resolve",
		"--innodb-flush-log-at-trx-commit=1",
		"--innodb-buffer-pool-size=64M",
		"--max-connections=300",
	}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	// Not CommandContext: the server outlives the start's context.
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a ^C to the program is not the server's
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("mariadbproc: start mariadbd: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	if err := s.waitReady(ctx); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		s.cmd = nil
		logText, _ := os.ReadFile(filepath.Join(s.dir, "error.log"))
		return fmt.Errorf("mariadbproc: mariadbd did not come up: %w\n%s", err, tail(logText))
	}
	return nil
}

// waitReady pings the server until it answers, it exits, or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName = "root", "tcp", fmt.Sprintf("127.0.0.1:%d", s.Port), "mysql"
	cfg.Timeout = 2 * time.Second
	cfg.Logger = log.New(io.Discard, "", 0)
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	for {
		err = db.PingContext(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return errors.New("mariadbd exited")
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Kill crashes the server with SIGKILL (mariadbd is one process) and returns once
// it has exited: nothing is flushed or shut down; Restart runs InnoDB's crash
// recovery.
func (s *Server) Kill() error {
	if s.cmd == nil {
		return errors.New("mariadbproc: Kill: the server is not running; Restart it first")
	}
	_ = s.cmd.Process.Kill()
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		return errors.New("mariadbproc: Kill: mariadbd still runs 30 s after SIGKILL")
	}
	s.cmd = nil
	return nil
}

// Restart starts a killed server again on its data directory and port and
// returns once it answers (crash recovery done), within the start timeout or ctx.
func (s *Server) Restart(ctx context.Context) error {
	if s.cmd != nil {
		return errors.New("mariadbproc: Restart: the server runs; Kill it first")
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.start(ctx)
}

// Stop kills the server (nothing of it is worth keeping) and removes its directory.
func (s *Server) Stop() error {
	if s == nil {
		return nil
	}
	var err error
	if s.cmd != nil {
		err = s.Kill()
	}
	return errors.Join(err, os.RemoveAll(s.dir))
}

// Dir is the server's temporary directory (data in Dir/data, log in Dir/error.log).
func (s *Server) Dir() string { return s.dir }

// binaries finds mariadb-install-db and mariadbd.
func binaries() (install, server string, err error) {
	find := func(names ...string) string {
		for _, n := range names {
			if p, err := exec.LookPath(n); err == nil {
				return p
			}
			for _, d := range []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"} {
				if p := filepath.Join(d, n); isExec(p) {
					return p
				}
			}
		}
		return ""
	}
	install, server = find("mariadb-install-db", "mysql_install_db"), find("mariadbd", "mysqld")
	if install == "" || server == "" {
		return "", "", errors.New("mariadbproc: no MariaDB server binaries (mariadb-install-db, mariadbd) on PATH or in /usr/sbin, /usr/bin: " +
			"install them (Debian/Ubuntu: apt-get install mariadb-server; scripts/services.sh does)")
	}
	return install, server, nil
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

func tail(b []byte) []byte {
	if len(b) > 4000 {
		return b[len(b)-4000:]
	}
	return b
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
