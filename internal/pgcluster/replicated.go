package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReplicatedOptions configures StartReplicated. The zero value is an asynchronous
// primary with two standbys.
type ReplicatedOptions struct {
	Options
	// Standbys is the number of streaming-replication standbys, 1 to 5. Default 2.
	Standbys int
	// Sync makes replication synchronous: synchronous_standby_names = 'ANY 1
	// (s1, s2, …)' and synchronous_commit = on, so a commit returns once one standby
	// has flushed it. Otherwise the standbys are asynchronous: a commit returns
	// once the primary has written it, and the standbys follow a moment later.
	Sync bool
}

// Replicated is a private primary with streaming-replication standbys, all on
// loopback in one temporary directory: what a failover test kills and promotes.
// Node 0 is the first primary; the standbys are nodes 1 to Standbys, named s1, s2, ….
// Stop it when done.
type Replicated struct {
	primary *Cluster // owns the directory, the binaries and the credential
	nodes   []*node
	cur     int // the node that is the primary now
	sync    bool
}

type node struct {
	name string
	port int
	data string
	dead bool // killed: never restarted (it would be a second primary)
}

// StartReplicated starts a primary and opt.Standbys standbys made with
// pg_basebackup -R, and returns once every standby streams from the primary (and,
// with Sync, counts in its quorum). Every wait is bounded by opt.StartTimeout
// (default 2 minutes).
func StartReplicated(ctx context.Context, opt ReplicatedOptions) (*Replicated, error) {
	if opt.Standbys == 0 {
		opt.Standbys = 2
	}
	if opt.Standbys < 1 || opt.Standbys > 5 {
		return nil, fmt.Errorf("pgcluster: ReplicatedOptions.Standbys is %d; want 1 to 5", opt.Standbys)
	}
	if opt.StartTimeout <= 0 {
		opt.StartTimeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, opt.StartTimeout)
	defer cancel()
	names := make([]string, opt.Standbys)
	for i := range names {
		names[i] = "s" + strconv.Itoa(i+1)
	}
	settings := []string{
		"wal_keep_size = '512MB'", // no slots: a standby that falls behind still finds its WAL
		"hot_standby = on",
		"wal_sender_timeout = '5s'",
		"wal_receiver_timeout = '5s'",
		"wal_retrieve_retry_interval = '200ms'",
	}
	if opt.Sync {
		settings = append(settings,
			"synchronous_standby_names = 'ANY 1 ("+strings.Join(names, ", ")+")'",
			"synchronous_commit = on")
	}
	opt.Settings = append(settings, opt.Settings...)
	p, err := Start(ctx, opt.Options)
	if err != nil {
		return nil, err
	}
	r := &Replicated{primary: p, sync: opt.Sync,
		nodes: []*node{{name: "primary", port: p.Port, data: filepath.Join(p.dir, "data")}}}
	ok := false
	defer func() {
		if !ok {
			_ = r.Stop(context.WithoutCancel(ctx))
		}
	}()
	for _, name := range names {
		if err := r.addStandby(ctx, name); err != nil {
			return nil, err
		}
	}
	if err := r.waitStreaming(ctx, 0, opt.Standbys); err != nil {
		return nil, err
	}
	ok = true
	return r, nil
}

// addStandby makes a standby of the current primary with pg_basebackup -R and
// starts it on a port of its own.
func (r *Replicated) addStandby(ctx context.Context, name string) error {
	c := r.primary
	data := filepath.Join(c.dir, name)
	prim := r.nodes[r.cur]
	if out, err := c.run(ctx, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(prim.port), "-U", "postgres",
		"-D", data, "-X", "stream", "-R", "-c", "fast", "--no-sync"); err != nil {
		return fmt.Errorf("pgcluster: pg_basebackup for %s: %w\n%s", name, err, out)
	}
	var lastErr error
	for range 3 { // a port taken between freePort and start is worth two retries
		port, err := freePort()
		if err != nil {
			return err
		}
		// Later lines of postgresql.auto.conf win: the standby's own port and its
		// name, which synchronous_standby_names counts.
		extra := fmt.Sprintf("port = %d\nprimary_conninfo = '%s'\n", port, conninfo(prim.port, name))
		if err := c.appendConf(filepath.Join(data, "postgresql.auto.conf"), extra); err != nil {
			return err
		}
		out, err := c.run(ctx, "pg_ctl", "-D", data, "-l", filepath.Join(c.dir, name+".log"), "-w", "-t", "60", "start")
		if err == nil {
			r.nodes = append(r.nodes, &node{name: name, port: port, data: data})
			return nil
		}
		log, _ := os.ReadFile(filepath.Join(c.dir, name+".log"))
		lastErr = fmt.Errorf("pgcluster: pg_ctl start %s: %w\n%s\n%s", name, err, out, log)
		if ctx.Err() != nil {
			break
		}
	}
	return lastErr
}

func conninfo(port int, name string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", port, name)
}

// waitStreaming waits until n standbys stream from node i (and, with Sync, are
// candidates of its quorum).
func (r *Replicated) waitStreaming(ctx context.Context, i, n int) error {
	q := "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
	if r.sync {
		q += " AND sync_state IN ('sync', 'quorum')"
	}
	return r.poll(ctx, "standbys streaming from "+r.nodes[i].name, func(ctx context.Context) error {
		var got int
		if err := r.queryRow(ctx, i, q, &got); err != nil {
			return err
		}
		if got < n {
			return fmt.Errorf("%d of %d standbys streaming", got, n)
		}
		return nil
	})
}

// URL is one multi-host URL of every node with target_session_attrs=read-write:
// pgx (pgxpool, and database/sql through pgx's stdlib) tries the hosts in turn
// and keeps the one that accepts writes, so a client holding it follows the
// primary through a failover by reconnecting. Superuser postgres, database
// postgres, trust authentication.
func (r *Replicated) URL() string {
	hosts := make([]string, len(r.nodes))
	for i, n := range r.nodes {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(n.port)
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=5"
}

// NodeURL is the URL of node i alone (0 is the first primary).
func (r *Replicated) NodeURL(i int) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", r.nodes[i].port)
}

// Nodes is the number of nodes, the first primary included.
func (r *Replicated) Nodes() int { return len(r.nodes) }

// Name is node i's name: "primary" for node 0, s1, s2, … for the standbys.
func (r *Replicated) Name(i int) string { return r.nodes[i].name }

// Primary is the node that is the primary now.
func (r *Replicated) Primary() int { return r.cur }

// Sync reports whether replication is synchronous.
func (r *Replicated) Sync() bool { return r.sync }

// Dir is the cluster's temporary directory (logs in Dir/*.log).
func (r *Replicated) Dir() string { return r.primary.dir }

// KillPrimary kills the current primary's postmaster and every process of it with
// SIGKILL, as a machine that loses power does (its kernel's page cache aside: it
// is never started again). It returns once they are gone.
func (r *Replicated) KillPrimary(ctx context.Context) error {
	n := r.nodes[r.cur]
	if n.dead {
		return fmt.Errorf("pgcluster: %s is already dead", n.name)
	}
	b, err := os.ReadFile(filepath.Join(n.data, "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("pgcluster: kill %s: %w", n.name, err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return fmt.Errorf("pgcluster: kill %s: postmaster.pid: %w", n.name, err)
	}
	pids := append(children(pid), pid) // before the postmaster dies and they are orphaned
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	n.dead = true
	return r.poll(ctx, "the end of "+n.name+"'s processes", func(context.Context) error {
		for _, p := range pids {
			if syscall.Kill(p, 0) == nil {
				if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p)); !isZombie(st) {
					return fmt.Errorf("process %d alive", p)
				}
			}
		}
		return nil
	})
}

// children lists the processes whose parent is pid (Linux /proc).
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces, so read after the last ')'.
		s := string(st)
		if j := strings.LastIndexByte(s, ')'); j >= 0 {
			if f := strings.Fields(s[j+1:]); len(f) > 1 && f[1] == strconv.Itoa(pid) {
				out = append(out, p)
			}
		}
	}
	return out
}

func isZombie(stat []byte) bool {
	s := string(stat)
	j := strings.LastIndexByte(s, ')')
	return j < 0 || strings.HasPrefix(strings.TrimSpace(s[j+1:]), "Z")
}

// MostAdvanced is the live standby that has received the most WAL: the one to
// promote. With synchronous replication (ANY 1) only it is sure to hold every
// commit the primary acknowledged; promoting another can lose some.
func (r *Replicated) MostAdvanced(ctx context.Context) (int, error) {
	best, bestLSN := -1, ""
	for i, n := range r.nodes {
		if n.dead || i == r.cur {
			continue
		}
		var lsn, diff string
		if err := r.queryRow(ctx, i, "SELECT COALESCE(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())::text", &lsn); err != nil {
			return -1, err
		}
		if best >= 0 {
			if err := r.queryRow(ctx, i, "SELECT (pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn) > 0)::text", &diff, lsn, bestLSN); err != nil {
				return -1, err
			}
		}
		if best < 0 || diff == "true" {
			best, bestLSN = i, lsn
		}
	}
	if best < 0 {
		return -1, errors.New("pgcluster: no live standby to promote")
	}
	return best, nil
}

// Promote promotes standby i (pg_ctl promote), points every other live standby at
// it (primary_conninfo, reloaded: they follow its new timeline), and returns once
// it accepts a write (with Sync: once a standby confirmed it). The old primary
// must be dead (KillPrimary). Bounded by a minute.
func (r *Replicated) Promote(ctx context.Context, i int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if i <= 0 || i >= len(r.nodes) || r.nodes[i].dead || i == r.cur {
		return fmt.Errorf("pgcluster: Promote(%d): not a live standby (nodes 1 to %d)", i, len(r.nodes)-1)
	}
	if !r.nodes[r.cur].dead {
		return fmt.Errorf("pgcluster: Promote(%d): %s is still the primary; KillPrimary first", i, r.nodes[r.cur].name)
	}
	n := r.nodes[i]
	if out, err := r.primary.run(ctx, "pg_ctl", "-D", n.data, "-w", "-t", "60", "promote"); err != nil {
		return fmt.Errorf("pgcluster: pg_ctl promote %s: %w\n%s", n.name, err, out)
	}
	r.cur = i
	for j, o := range r.nodes {
		if j == i || o.dead || j == 0 {
			continue
		}
		err := r.poll(ctx, "re-point "+o.name, func(ctx context.Context) error {
			conn, err := pgx.Connect(ctx, r.NodeURL(j))
			if err != nil {
				return err
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, "ALTER SYSTEM SET primary_conninfo = '"+conninfo(n.port, o.name)+"'"); err != nil {
				return err
			}
			_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
			return err
		})
		if err != nil {
			return err
		}
	}
	return r.poll(ctx, n.name+" accepting writes", func(ctx context.Context) error {
		var xid string
		return r.queryRow(ctx, i, "SELECT txid_current()::text", &xid)
	})
}

// Stop stops every live node (immediate shutdown) and removes the directory.
func (r *Replicated) Stop(ctx context.Context) error {
	if r == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var errs []error
	for i := len(r.nodes) - 1; i >= 1; i-- {
		n := r.nodes[i]
		if n.dead {
			continue
		}
		if out, err := r.primary.run(ctx, "pg_ctl", "-D", n.data, "-m", "immediate", "-w", "stop"); err != nil {
			errs = append(errs, fmt.Errorf("pgcluster: pg_ctl stop %s: %w\n%s", n.name, err, out))
		}
	}
	if r.nodes[0].dead { // Cluster.Stop would fail on a killed server: only remove its files
		errs = append(errs, os.RemoveAll(r.primary.dir))
	} else {
		errs = append(errs, r.primary.Stop(ctx))
	}
	return errors.Join(errs...)
}

func (r *Replicated) queryRow(ctx context.Context, i int, q string, dst any, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.NodeURL(i))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, q, args...).Scan(dst)
}

// poll calls try until it succeeds, every 50 ms, or ctx ends.
func (r *Replicated) poll(ctx context.Context, what string, try func(context.Context) error) error {
	for {
		err := try(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) appendConf(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	return errors.Join(err, f.Close())
}
