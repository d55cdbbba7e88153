package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/audit"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/internal/httpd"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/redact"
)

// defaultAuditListen serves the continuous audit's /metrics and /healthz on
// loopback only, as the relay's and the admin's defaults.
const defaultAuditListen = "127.0.0.1:9467"

// auditOptions are the flags of idem audit.
type auditOptions struct {
	db, listen          string
	consumers           open.ConsumerFlags
	deliveries          urlList
	records             string
	retention           time.Duration
	window, grace       time.Duration
	every               time.Duration
	pageSize, maxRepair int
	repair, json        bool
	repairs             bool
	limit               int
}

const auditSynopsis = `Audits a live flow end to end (package audit): reads the messages the outbox of
--db published in the last --window and, for each consumer of their topics,
whether it applied them (holds their key), dead-lettered them, or neither:
missing when published longer ago than --grace, in flight otherwise. It prints
one row per topic and consumer (published, applied, dead-lettered, missing, in
flight, republished, enqueue → applied latency), the missing ids, and the flow's
sentence. It reads; it writes only with --repair.

Consumers (--consumer, repeatable; at least one):
  NAME=TOPIC[,TOPIC...]            the consumer's keys and dead letters are in --db
  NAME=TOPIC[,TOPIC...]@DB-URL     they are in another database (sqlite:PATH,
                                   postgres://…, mysql://…)
  NAME is the consumer's inbox.Config.Consumer, the TOPICs the outbox topics it
  reads. The value splits at its first '=' and at the last '@' that starts a
  database URL, so a topic may hold an '@' and the URL its user@host.

Databases (--db, the producer's outbox):
  postgres://user:pass@host:5432/db
  mysql://user:pass@host:3306/db
  sqlite:PATH                      an existing file

--repair republishes each missing message: a copy of its outbox row, under the
same id, which the relay publishes as any other (a consumer that did get it
drops the copy by its key); never one a consumer dead-lettered (replay it: idem
dlq), nor one a consumer that holds no key at all reads. At most --max-repairs a
run, 3 per message; each is recorded (--repairs lists them, newest first).
The window may be at most half the consumers' key --retention: a key forgotten
after its retention would read as missing.

--deliveries URL (repeatable) names a consumer process's /metrics: the report
then says how many duplicate deliveries the inboxes suppressed.

Exit status (one run): 0 nothing missing; 1 messages missing (the last line says
how many, and how many --repair republished), or the audit failed; 2 a bad
command line.

--every D audits every D until SIGINT or SIGTERM, logs each run's summary line
and serves /metrics (idem_audit_*) and /healthz on --listen (loopback by
default): 503 when the last run failed or none succeeded within 3 × --every.`

func (m *Main) runAudit(ctx context.Context, args []string) error {
	fs := m.newFlagSet("audit", auditSynopsis)
	o := &auditOptions{}
	fs.StringVar(&o.db, "db", "", "the producer's database (its outbox): postgres://…, mysql://… or sqlite:PATH  [$IDEM_DB]")
	fs.Var(&o.consumers, "consumer", "a consumer of the outbox's topics, "+open.ConsumerSyntax+"; repeatable")
	fs.StringVar(&o.records, "records-table", "", "the consumers' records table (default idem_records)")
	fs.DurationVar(&o.retention, "retention", audit.DefaultRetention, "the consumers' key retention (inbox.Config.Retention); --window may be at most half of it")
	fs.DurationVar(&o.window, "window", audit.DefaultWindow, "how far back to read the published messages")
	fs.DurationVar(&o.grace, "grace", audit.DefaultGrace, "how long a message may be on its way before it counts as missing (above the consumers' lag and the broker's duplicate window)")
	fs.IntVar(&o.pageSize, "page-size", audit.DefaultPageSize, fmt.Sprintf("outbox rows read per query, 1 to %d", audit.MaxPageSize))
	fs.BoolVar(&o.repair, "repair", false, "republish the missing messages under their ids (writes to --db's outbox)")
	fs.IntVar(&o.maxRepair, "max-repairs", audit.DefaultMaxRepairs, "with --repair: messages republished per run at most")
	fs.Var(&o.deliveries, "deliveries", "a consumer process's /metrics URL (idem_inbox_messages_total), for the duplicates suppressed; repeatable")
	fs.BoolVar(&o.json, "json", false, "print the report (or --repairs) as one JSON document")
	fs.BoolVar(&o.repairs, "repairs", false, "list the recorded repairs, newest first, instead of auditing")
	fs.IntVar(&o.limit, "limit", 100, fmt.Sprintf("with --repairs: how many, 1 to %d", audit.MaxPageSize))
	fs.DurationVar(&o.every, "every", 0, "audit every D (such as 5m) until stopped, serving /metrics and /healthz; 0: once")
	fs.StringVar(&o.listen, "listen", defaultAuditListen, "with --every: address of /metrics and /healthz (:9467 for every interface); empty for none")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	o.db = cmp.Or(o.db, os.Getenv("IDEM_DB"))
	specs, err := o.check(fs)
	if err != nil {
		return cli.UsageErr(fs, "%s", redact.String(err.Error()))
	}
	if o.repairs {
		return m.listRepairs(ctx, o)
	}
	if o.every > 0 {
		return m.auditLoop(ctx, fs, o, specs)
	}
	cfg := o.config()
	cfg.Logger = cli.Log(m.Stderr) // a /metrics source that does not answer, each repair
	a, closeDBs, err := open.Auditor(ctx, o.db, specs, o.auditFlags(), cfg)
	if err != nil {
		return auditOpenErr(fs, err)
	}
	defer closeDBs()
	rep, err := a.Run(ctx)
	if err != nil {
		return err
	}
	if err := o.print(m.Stdout, rep); err != nil {
		return err
	}
	if n := rep.Missing(); n > 0 {
		msg := fmt.Sprintf("idem audit: %d messages missing", n)
		if r := len(rep.Repaired); r > 0 {
			msg += fmt.Sprintf(", %d republished by --repair (the next audit after --grace checks them)", r)
		} else if !o.repair {
			msg += " (none repaired: --repair republishes them)"
		}
		fmt.Fprintln(m.Stderr, msg)
		return &cli.ExitError{Msg: msg}
	}
	return nil
}

// check validates the flags before anything connects; its errors name the flag.
func (o *auditOptions) check(fs *flag.FlagSet) ([]open.ConsumerSpec, error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	switch {
	case o.db == "":
		return nil, errors.New("--db is required: pass the producer's database, postgres://user@host:5432/db, mysql://user@host:3306/db or sqlite:PATH (or set $IDEM_DB)")
	case len(o.consumers) == 0 && !o.repairs:
		return nil, errors.New("--consumer is required: name each consumer of the outbox's topics, " + open.ConsumerSyntax + ", such as --consumer billing=orders")
	case given["max-repairs"] && !o.repair:
		return nil, errors.New("--max-repairs without --repair: add --repair to republish the missing messages, or drop --max-repairs")
	case o.maxRepair < 1:
		return nil, fmt.Errorf("--max-repairs must be at least 1 (got %d)", o.maxRepair)
	case o.window <= 0:
		return nil, fmt.Errorf("--window must be positive, such as 1h (got %v)", o.window)
	case o.grace <= 0 || o.grace >= o.window:
		return nil, fmt.Errorf("--grace must be positive and shorter than --window (%v), such as 5m (got %v)", o.window, o.grace)
	case o.retention <= 0:
		return nil, fmt.Errorf("--retention must be positive, the consumers' inbox.Config.Retention, such as 168h (got %v)", o.retention)
	case o.window > o.retention/2:
		return nil, fmt.Errorf("--window (%v) is more than half of --retention (%v): a key the consumers forgot after their retention would read as missing, and --repair would apply its message again; audit at most %v back, or give the consumers' retention", o.window, o.retention, o.retention/2)
	case o.pageSize < 1 || o.pageSize > audit.MaxPageSize:
		return nil, fmt.Errorf("--page-size must be 1 to %d (got %d)", audit.MaxPageSize, o.pageSize)
	case o.limit < 1 || o.limit > audit.MaxPageSize:
		return nil, fmt.Errorf("--limit must be 1 to %d (got %d)", audit.MaxPageSize, o.limit)
	case o.every < 0:
		return nil, fmt.Errorf("--every must be positive, such as 5m, or 0 for one run (got %v)", o.every)
	case o.repairs && (o.every > 0 || o.repair):
		return nil, errors.New("--repairs lists the recorded repairs and exits: drop --every and --repair")
	case given["limit"] && !o.repairs:
		return nil, errors.New("--limit without --repairs: --limit bounds the repairs listed")
	}
	if err := o.deliveries.check("--deliveries"); err != nil {
		return nil, err
	}
	if _, err := open.ParseDB(o.db); err != nil {
		return nil, err
	}
	return o.consumers.Specs()
}

// config is the audit's configuration of the flags.
func (o *auditOptions) config() audit.Config {
	cfg := audit.Config{Window: o.window, Grace: o.grace, PageSize: o.pageSize, Repair: o.repair, MaxRepairs: o.maxRepair}
	if len(o.deliveries) > 0 {
		cfg.Deliveries = audit.ScrapeDeliveries(&http.Client{Timeout: audit.ScrapeTimeout}, o.deliveries...)
	}
	return cfg
}

// auditFlags is how the consumers are read.
func (o *auditOptions) auditFlags() open.AuditFlags {
	return open.AuditFlags{RecordsTable: o.records, Retention: o.retention}
}

// auditOpenErr turns a bad setting that only the audit could judge (a window
// longer than half the retention, a records table name) into a usage error
// naming the flag.
func auditOpenErr(fs *flag.FlagSet, err error) error {
	var ie *idem.InputError
	if !errors.As(err, &ie) {
		return err
	}
	for field, fl := range map[string]string{"audit.Config.Window": "--window", "audit.Config.Grace": "--grace",
		"audit.Config.PageSize": "--page-size", ".Table": "--records-table", ".Retention": "--retention", ".Name": "--consumer"} {
		if strings.HasSuffix(ie.Field, field) {
			return cli.UsageErr(fs, "%s", redact.String(fmt.Sprintf("%s: %s: %s", fl, ie.Reason, ie.Fix)))
		}
	}
	return err
}

// print writes the report as text or JSON.
func (o *auditOptions) print(w io.Writer, rep *audit.Report) error {
	if o.json {
		// Empty lists as [], not null, as the admin API writes them.
		r := *rep
		if r.Blind == nil {
			r.Blind = []audit.Blind{}
		}
		if r.Repaired == nil {
			r.Repaired = []audit.Repair{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(&r)
	}
	return rep.WriteText(w)
}

// listRepairs prints the recorded repairs, newest first.
func (m *Main) listRepairs(ctx context.Context, o *auditOptions) error {
	list, err := open.AuditRepairs(ctx, o.db, o.limit)
	if err != nil {
		return err
	}
	if o.json {
		if list == nil {
			list = []audit.Repair{}
		}
		enc := json.NewEncoder(m.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Repairs []audit.Repair `json:"repairs"`
		}{list})
	}
	if len(list) == 0 {
		fmt.Fprintln(m.Stdout, "no repairs recorded")
		return nil
	}
	tw := tabwriter.NewWriter(m.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "COPY\tORIGINAL\tMSG ID\tTOPIC\tCONSUMERS\tAT\tREASON")
	for _, r := range list {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\n", r.CopyID, r.OrigID, r.MsgID, r.Topic, strings.Join(r.Consumers, ","),
			r.At.UTC().Format(time.RFC3339), r.Reason)
	}
	return tw.Flush()
}

// summary is the one line a continuous audit logs per run.
func summary(rep *audit.Report) []any {
	var pub, app, dead, miss, fly, repub int64
	for _, r := range rep.Rows {
		pub, app, dead, miss, fly, repub = pub+r.Published, app+r.Applied, dead+r.DeadLettered, miss+r.Missing, fly+r.InFlight, repub+r.Republished
	}
	return []any{"rows", len(rep.Rows), "published", pub, "applied", app, "dead_lettered", dead, "missing", miss,
		"in_flight", fly, "republished", repub, "repaired", len(rep.Repaired), "blind", len(rep.Blind), "scanned", rep.Scanned}
}

// auditHealth is the continuous audit's /healthz: unhealthy when the last run
// failed, or when none succeeded within 3 intervals.
type auditHealth struct {
	mu      sync.Mutex
	every   time.Duration
	since   time.Time // the start, then the last success
	lastErr error
}

func (h *auditHealth) done(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastErr = err
	if err == nil {
		h.since = time.Now()
	}
}

func (h *auditHealth) check(context.Context) (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.lastErr != nil:
		return false, "unhealthy: the last audit failed: " + cli.ReasonOf(h.lastErr)
	case time.Since(h.since) > 3*h.every:
		return false, fmt.Sprintf("unhealthy: no audit succeeded for %v (3 × --every)", time.Since(h.since).Round(time.Second))
	}
	return true, "ok"
}

// auditLoop audits every --every until ctx ends.
func (m *Main) auditLoop(ctx context.Context, fs *flag.FlagSet, o *auditOptions, specs []open.ConsumerSpec) error {
	log, reg, stopTracing, err := cli.StartDaemon(ctx, m.Stderr, "audit")
	if err != nil {
		return err
	}
	defer stopTracing()
	cfg := o.config()
	cfg.Registerer, cfg.Logger = reg, log
	a, closeDBs, err := open.Auditor(ctx, o.db, specs, o.auditFlags(), cfg)
	if err != nil {
		return auditOpenErr(fs, err)
	}
	defer closeDBs()
	if err := metrics.AuditInterval(reg, o.every); err != nil {
		return err
	}
	h := &auditHealth{every: o.every, since: time.Now()}
	srvErr := make(chan error, 1)
	if o.listen != "" {
		timeouts := httpd.Timeouts{Read: 10 * time.Second, Write: 30 * time.Second, Idle: time.Minute}
		srv, addr, err := startServer(o.listen, "--listen", cli.Probes(reg, h.check), timeouts, log, srvErr)
		if err != nil {
			return err
		}
		defer srv.Close()
		fmt.Fprintf(m.Stderr, "idem audit: /metrics and /healthz on %s\n", addr)
	}
	fmt.Fprintf(m.Stderr, "idem audit: every %v, %d consumer(s), window %v, grace %v, repair %v\n", o.every, len(specs), o.window, o.grace, o.repair)
	loopErr := make(chan error, 1)
	go func() {
		loopErr <- a.Loop(ctx, o.every, func(rep *audit.Report, err error) {
			h.done(err)
			if err != nil {
				return // Run logged it
			}
			log.Info("idem audit: run", summary(rep)...)
		})
	}()
	select {
	case err = <-srvErr:
		return err
	case err = <-loopErr:
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintln(m.Stderr, "idem audit: stopped")
		return nil
	}
	return err
}

// urlList is a repeatable URL flag; its values are checked after parsing.
type urlList []string

func (f *urlList) String() string { return redact.String(strings.Join(*f, ",")) }

func (f *urlList) Set(v string) error {
	*f = append(*f, v)
	return nil
}

func (f urlList) check(flag string) error {
	for _, u := range f {
		if err := cli.CheckURL(flag, u); err != nil {
			return err
		}
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("%s %s: not an http:// or https:// URL: name a consumer process's /metrics, such as http://127.0.0.1:9090/metrics", flag, redact.URL(u))
		}
	}
	return nil
}
