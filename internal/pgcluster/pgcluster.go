// Package pgcluster starts a private PostgreSQL cluster in a temporary directory, with
// wal_level=logical, on a free loopback port: what the CDC tests and `idem verify
// --relay cdc` without --db run against, so they need no configured server.
//
// It runs the server binaries of the machine's PostgreSQL installation (initdb and
// pg_ctl from /usr/lib/postgresql/*/bin, or PATH). initdb refuses to run as root, so
// under root the cluster belongs to the "postgres" OS user: the temporary directory is
// handed to it and the binaries run with its uid and gid.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Options configures Start. The zero value is usable.
type Options struct {
	// BinDir holds initdb and pg_ctl. Default: the highest version under
	// /usr/lib/postgresql/*/bin, else the directory of initdb on PATH.
	BinDir string
	// Settings are extra postgresql.conf lines, e.g. "shared_preload_libraries =
	// 'pg_stat_statements'".
	Settings []string
	// StartTimeout bounds initdb plus start. Default 2 minutes.
	StartTimeout time.Duration
}

// Cluster is a running private cluster. Stop it when done: it is a server process
// that outlives the program otherwise.
type Cluster struct {
	// URL is a postgres:// URL of its "postgres" database, superuser postgres, trust
	// authentication on 127.0.0.1 only.
	URL  string
	Port int

	dir    string // the temporary directory; data in dir/data
	bin    string
	cred   *syscall.Credential
	killed bool // Kill ran and Restart has not
}

// Start initdb's a cluster into a new temporary directory and starts it.
func Start(ctx context.Context, opt Options) (*Cluster, error) {
	if opt.StartTimeout <= 0 {
		opt.StartTimeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, opt.StartTimeout)
	defer cancel()
	bin, err := binDir(opt.BinDir)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idem-pg-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, bin: bin}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(dir)
		}
	}()
	if os.Geteuid() == 0 {
		if c.cred, err = postgresUser(); err != nil {
			return nil, err
		}
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := c.run(ctx, "initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
		return nil, fmt.Errorf("pgcluster: initdb: %w\n%s", err, out)
	}
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		conf := append([]string{
			"listen_addresses = '127.0.0.1'",
			"port = " + strconv.Itoa(port),
			"unix_socket_directories = '" + dir + "'",
			"wal_level = logical",
			"max_replication_slots = 20",
			"max_wal_senders = 20",
			"max_connections = 200",
			"fsync = off", // a throwaway cluster; commits still wait for the WAL write, which logical decoding reads
			"full_page_writes = off",
		}, opt.Settings...)
		if err := c.writeConf(filepath.Join(data, "postgresql.auto.conf"), strings.Join(conf, "\n")+"\n"); err != nil {
			return nil, err
		}
		out, err := c.run(ctx, "pg_ctl", "-D", data, "-l", filepath.Join(dir, "server.log"), "-w", "-t", "60", "start")
		if err == nil {
			c.Port = port
			c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
			ok = true
			return c, nil
		}
		if attempt == 2 || ctx.Err() != nil { // a port taken between freePort and start is worth two retries
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			return nil, fmt.Errorf("pgcluster: pg_ctl start: %w\n%s\n%s", err, out, log)
		}
	}
}

// Available reports why Start cannot run here, or nil: the server binaries are
// missing, or the program runs as root on a machine without a "postgres" user.
func Available(opt Options) error {
	if _, err := binDir(opt.BinDir); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		_, err := postgresUser()
		return err
	}
	return nil
}

// Stop stops the server (fast shutdown: nothing of it is worth keeping) and removes
// its directory.
func (c *Cluster) Stop(ctx context.Context) error {
	if c == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out []byte
	var err error
	if !c.killed {
		out, err = c.run(ctx, "pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "stop")
	}
	if rerr := os.RemoveAll(c.dir); err == nil {
		err = rerr
	} else {
		err = fmt.Errorf("pgcluster: pg_ctl stop: %w\n%s", err, out)
	}
	return err
}

// Kill crashes the server: SIGKILL to the postmaster and, in the same moment, to
// every process it started (backends, checkpointer, WAL writer…), as a power cut or
// the OOM killer would. Nothing is shut down cleanly; Restart then replays the WAL
// (crash recovery). Kill returns once none of those processes runs any more, so
// no orphan backend holds the port or the shared memory; it waits at most 30 s.
func (c *Cluster) Kill() error {
	if c.killed {
		return errors.New("pgcluster: Kill: the server is already killed; Restart it first")
	}
	data := filepath.Join(c.dir, "data")
	pid, err := postmasterPID(data)
	if err != nil {
		return err
	}
	procs := append([]int{pid}, childrenOf(pid)...)
	for _, p := range procs {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	c.killed = true
	// A backend forked in the moment between the listing and the kill dies of the
	// postmaster's death on its own; list again until none is left.
	deadline := time.Now().Add(30 * time.Second)
	for {
		alive := 0
		for _, p := range append(procs, childrenOf(pid)...) {
			if running(p) {
				alive++
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
		if alive == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgcluster: Kill: %d process(es) of the server still run 30 s after SIGKILL", alive)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The lock files (of the data directory and of the Unix socket) name a dead
	// process, or a zombie its parent has not reaped, which the server's check
	// would take for a live one: the processes are gone, so the files are stale.
	sock := filepath.Join(c.dir, ".s.PGSQL."+strconv.Itoa(c.Port))
	for _, f := range []string{filepath.Join(data, "postmaster.pid"), sock + ".lock", sock} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("pgcluster: Kill: %w", err)
		}
	}
	return nil
}

// Restart starts a killed server again on its data directory and port: the server
// replays its WAL from the last checkpoint (crash recovery) before it accepts
// connections, and Restart returns once it does (at most 2 minutes, or ctx).
func (c *Cluster) Restart(ctx context.Context) error {
	if !c.killed {
		return errors.New("pgcluster: Restart: the server runs; Kill it first")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := c.run(ctx, "pg_ctl", "-D", filepath.Join(c.dir, "data"), "-l", filepath.Join(c.dir, "server.log"), "-w", "-t", "110", "start")
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
		return fmt.Errorf("pgcluster: Restart: pg_ctl start: %w\n%s\n%s", err, out, tail(log, 4000))
	}
	c.killed = false
	return nil
}

// postmasterPID reads the postmaster's pid from the first line of postmaster.pid.
func postmasterPID(data string) (int, error) {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("pgcluster: the server's pid: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pgcluster: postmaster.pid does not start with a pid: %q", line)
	}
	return pid, nil
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := procStat(p); ok && ppid == pid {
			out = append(out, p)
		}
	}
	return out
}

// running reports whether process p exists and is not a zombie.
func running(p int) bool {
	_, state, ok := procStat(p)
	return ok && state != 'Z' && state != 'X'
}

// procStat reads the parent pid and the state of process p from /proc/p/stat.
func procStat(p int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) S ppid …": comm may hold spaces and parentheses; the last ')' ends it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0][0], err == nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// Dir is the cluster's temporary directory (its data directory is Dir/data).
func (c *Cluster) Dir() string { return c.dir }

func (c *Cluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
		cmd.Env = append(cmd.Env, "HOME="+c.dir, "USER=postgres")
	}
	// pg_ctl start leaves the server running with our stdout: give it a file-less
	// buffer through a pipe that closes when pg_ctl exits, not when the server does.
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return buf.Bytes(), err
}

func (c *Cluster) writeConf(path, text string) error {
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return err
	}
	if c.cred != nil {
		return os.Chown(path, int(c.cred.Uid), int(c.cred.Gid))
	}
	return nil
}

// binDir finds the directory holding initdb and pg_ctl.
func binDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(found, func(i, j int) bool { return version(found[i]) > version(found[j]) })
	if len(found) > 0 {
		return filepath.Dir(found[0]), nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("pgcluster: no PostgreSQL server binaries (initdb, pg_ctl) in /usr/lib/postgresql/*/bin or PATH: " +
		"install them (Debian/Ubuntu: apt-get install postgresql; scripts/services.sh does) or pass --db postgres://… of a server with wal_level=logical")
}

// version is the major version in a /usr/lib/postgresql/<v>/bin path, 0 if none.
func version(path string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return v
}

// postgresUser is the credential of the "postgres" OS user, for running as root.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: running as root, and initdb refuses root, but there is no 'postgres' OS user to run it as (%v): "+
			"create one (useradd --system postgres) or run as an unprivileged user", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("pgcluster: user postgres: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
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
