package audit

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/rowscan"
)

// Auditor reconciles one outbox with the consumers of its topics. It is safe for
// concurrent use, though runs are meant to follow one another (Loop).
type Auditor struct {
	cfg   Config
	sides []*Side
	// byTopic lists, per audited topic, the consumers that read it.
	byTopic map[string][]target
	order   []rowKey // the report's rows, in order
	m       *metrics.Audit

	// The producer's database, through closures so that the Auditor is not
	// generic in its transaction type.
	read      reader
	inTx      func(ctx context.Context, fn func(idemsql.Querier) error) error
	stmts     *idemsql.OutboxSQL
	producerD string
}

type target struct {
	side *Side
	c    Consumer
}

type rowKey struct{ topic, consumer string }

// New returns an Auditor of the outbox in producer and the consumers of sides.
// It runs no statement: the outbox's migrations (set "outbox", version 4 or
// later, for idem_outbox_repairs) and the inbox's (set "inbox", for the
// dead letters' index) must be applied, as the outbox and the inbox apply them.
func New[Tx any](producer idemsql.TxDB[Tx], cfg Config, sides ...*Side) (*Auditor, error) {
	if err := producer.Validate(); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(sides) == 0 || slices.Contains(sides, nil) {
		return nil, &idem.InputError{Field: "audit.New sides", Reason: "is empty or holds a nil Side", Fix: "pass the consumers' databases, each from audit.ConsumersIn"}
	}
	st := producer.Driver.Outbox()
	if st.AuditPublished == "" || st.RepairCopy == "" || st.RepairsOf == nil || st.LockPublished == "" || st.RecordRepair == "" || st.Repairs == "" {
		return nil, &idem.InputError{Field: "audit.New producer", Reason: fmt.Sprintf("the %s driver has no audit statements (OutboxSQL.AuditPublished)", producer.Dialect()),
			Fix: "use a driver that fills them: idempg, idemsqlite, idemmysql"}
	}
	a := &Auditor{cfg: cfg, sides: sides, byTopic: map[string][]target{}, stmts: st, producerD: producer.Dialect().String()}
	seen := map[string]bool{}
	for _, s := range sides {
		for _, c := range s.consumers {
			if seen[c.Name] {
				return nil, &idem.InputError{Field: "audit.New sides", Reason: fmt.Sprintf("consumer %q is in two sides", c.Name), Fix: "give each consumer once"}
			}
			seen[c.Name] = true
			if cfg.Window > c.Retention/2 {
				return nil, &idem.InputError{Field: "audit.Config.Window", Reason: fmt.Sprintf("is %v, more than half of consumer %q's key retention (%v): a key forgotten after its retention would read as missing, and a repair would apply its message again", cfg.Window, c.Name, c.Retention),
					Fix: fmt.Sprintf("audit at most %v back, or give the consumer's Retention as it is", c.Retention/2)}
			}
			for _, t := range c.Topics {
				if !slices.ContainsFunc(a.byTopic[t], func(x target) bool { return x.c.Name == c.Name }) {
					a.byTopic[t] = append(a.byTopic[t], target{s, c})
					a.order = append(a.order, rowKey{t, c.Name})
				}
			}
		}
	}
	if a.m, err = metrics.NewAudit(cfg.Registerer); err != nil {
		return nil, err
	}
	a.read = readerOf(producer)
	a.inTx = func(ctx context.Context, fn func(idemsql.Querier) error) error {
		return producer.InTx(ctx, func(tx Tx) error { return fn(producer.Querier(tx)) })
	}
	return a, nil
}

// WithRepair returns an Auditor like a whose runs repair (Config.Repair) when
// on, and only read when not. It shares a's consumers and metrics: an operator's
// surface (the admin API) audits read-only and repairs on request through one
// Auditor.
func (a *Auditor) WithRepair(on bool) *Auditor {
	b := *a
	b.cfg.Repair = on
	return &b
}

// auditCols names the columns of OutboxSQL.AuditPublished, for a row that does
// not read.
var auditCols = []string{"id", "msg_id", "topic", "created_at", "published_at", "repair_of"}

// published is one outbox row as the audit reads it.
type published struct {
	id          int64
	msgID       string // "" when too long to be a key
	topic       string
	created     int64 // ms
	publishedAt int64 // ms
	repairOf    int64 // 0 unless a repair's copy
}

// Run audits the window once and, with Config.Repair, republishes what is
// missing. Its error is for a database that could not be read; what it found is
// in the Report. A run that its context ends returns the report of what it read
// so far, marked Truncated, with the context's error.
func (a *Auditor) Run(ctx context.Context) (*Report, error) {
	start := time.Now()
	rep, err := a.run(ctx)
	a.m.Run(metricRows(rep.Rows), len(rep.Blind), time.Since(start).Seconds(), err)
	if err != nil {
		a.cfg.Logger.Warn("audit: run failed", "err", err)
	}
	return rep, err
}

func (a *Auditor) run(ctx context.Context) (*Report, error) {
	now := a.cfg.Now()
	rep := &Report{At: now, From: now.Add(-a.cfg.Window), To: now, Grace: a.cfg.Grace}
	rows := map[rowKey]*rowState{}
	for _, k := range a.order {
		rows[k] = &rowState{Row: Row{Topic: k.topic, Consumer: k.consumer}}
	}
	defer func() {
		for _, k := range a.order {
			rows[k].finish()
			rep.Rows = append(rep.Rows, rows[k].Row)
		}
	}()
	blind, err := a.blind(ctx)
	if err != nil {
		return rep, err
	}
	for _, s := range a.sides {
		for _, c := range s.consumers {
			if why, ok := blind[c.Name]; ok {
				rep.Blind = append(rep.Blind, Blind{Consumer: c.Name, Reason: why})
			}
		}
	}
	missBefore := now.Add(-a.cfg.Grace).UnixMilli()
	// The keyset starts just before From: (From-1, MaxInt64) is after every row
	// published before From and before every row published at From or later.
	afterAt, afterID := rep.From.UnixMilli()-1, int64(math.MaxInt64)
	until := now.UnixMilli()
	budget := a.cfg.MaxRepairs
	if !a.cfg.Repair {
		budget = 0
	}
	for {
		page, read, err := a.page(ctx, afterAt, afterID, until)
		if err != nil {
			rep.Truncated = ctx.Err() != nil
			return rep, err
		}
		rep.Pages++
		rep.Scanned += int64(read.n)
		if read.n > 0 {
			afterAt, afterID = read.lastAt, read.lastID
		}
		if len(page) > 0 {
			repaired, err := a.audit(ctx, page, rows, blind, missBefore, &budget)
			rep.Repaired = append(rep.Repaired, repaired...)
			if err != nil {
				rep.Truncated = ctx.Err() != nil
				return rep, err
			}
		}
		if read.n < a.cfg.PageSize {
			break
		}
	}
	if a.cfg.Deliveries != nil {
		counts, err := a.cfg.Deliveries.Deliveries(ctx)
		if err != nil {
			a.cfg.Logger.Warn("audit: reading the consumers' delivery counts", "err", err)
		}
		for k, r := range rows {
			if d, ok := counts[k.consumer]; ok {
				r.Deliveries = &d
			}
		}
	}
	return rep, nil
}

// blind returns the consumers the audit cannot see, with why: those that hold
// no key at all.
func (a *Auditor) blind(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range a.sides {
		for _, c := range s.consumers {
			ok, err := s.hasKeys(ctx, c)
			if err != nil {
				return nil, fmt.Errorf("audit: reading consumer %q's keys (%s, table %s): %w", c.Name, s.dialect, c.Table, err)
			}
			if !ok {
				out[c.Name] = fmt.Sprintf("holds no key in %s table %s: it is not running yet, keys its messages by something else than the message id (inbox.Config.Key; a sequence or LSN consumer keeps a position, not a key per message), or keeps them in another table; its messages are counted as published only, and never repaired", s.dialect, c.Table)
			}
		}
	}
	return out, nil
}

// pageRead is where a page ended: the rows it read, including those page drops
// (a topic too long to be audited), and the keyset position of the last one.
type pageRead struct {
	n              int
	lastAt, lastID int64
}

func (a *Auditor) page(ctx context.Context, afterAt, afterID, until int64) ([]published, pageRead, error) {
	var (
		out  []published
		read pageRead
	)
	err := a.read.each(ctx, a.stmts.AuditPublished, []any{afterAt, afterID, until, a.cfg.PageSize}, func() {
		out, read = out[:0], pageRead{}
	}, func(rows idemsql.Rows) error {
		var (
			p             published
			msgID, topic  sql.NullString
			repairOf      sql.NullInt64
			created, pubd int64
		)
		// A row another service wrote with a value of the wrong type (SQLite keeps
		// text in an integer column) is read as far as it goes and counted as
		// unauditable, never the end of the run. id and published_at always read:
		// the keyset's comparisons leave out a row whose published_at is not a
		// number, and id is the table's integer key.
		bad, err := rowscan.Scan(rows, auditCols, &p.id, &msgID, &topic, &created, &pubd, &repairOf)
		if err != nil {
			return err
		}
		p.created, p.publishedAt, p.repairOf = created, pubd, repairOf.Int64
		read = pageRead{read.n + 1, pubd, p.id}
		if bad == "" && msgID.Valid && len(msgID.String) <= idem.MaxKeyLen {
			p.msgID = msgID.String
		}
		if !topic.Valid {
			return nil // no audited topic is that long
		}
		p.topic = topic.String
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, pageRead{}, fmt.Errorf("audit: reading the outbox (%s): %w", a.producerD, err)
	}
	return out, read, nil
}

// audit classifies one page for every consumer of its topics, and repairs what
// is missing.
func (a *Auditor) audit(ctx context.Context, page []published, rows map[rowKey]*rowState, blind map[string]string, missBefore int64, budget *int) ([]Repair, error) {
	// The ids each consumer must be asked about.
	type ask struct {
		t   target
		ids []string
	}
	asks := map[string]*ask{}
	var keep []published
	for _, p := range page {
		ts, ok := a.byTopic[p.topic]
		if !ok {
			continue
		}
		if p.repairOf != 0 {
			for _, t := range ts {
				rows[rowKey{p.topic, t.c.Name}].Republished++
			}
			continue
		}
		keep = append(keep, p)
		for _, t := range ts {
			r := rows[rowKey{p.topic, t.c.Name}]
			r.Published++
			if p.msgID == "" {
				r.Unauditable++
				continue
			}
			if _, isBlind := blind[t.c.Name]; isBlind {
				continue
			}
			k := asks[t.c.Name]
			if k == nil {
				k = &ask{t: t}
				asks[t.c.Name] = k
			}
			k.ids = append(k.ids, p.msgID)
		}
	}
	applied := map[string]map[string]record{}
	dead := map[string]map[string]int64{}
	for name, k := range asks {
		ids := dedupe(k.ids)
		ap, err := k.t.side.applied(ctx, k.t.c, ids)
		if err != nil {
			return nil, fmt.Errorf("audit: reading consumer %q's keys (%s, table %s): %w", name, k.t.side.dialect, k.t.c.Table, err)
		}
		var rest []string
		for _, id := range ids {
			if r, ok := ap[id]; !ok || !r.done {
				rest = append(rest, id)
			}
		}
		dl := map[string]int64{}
		if len(rest) > 0 {
			if dl, err = k.t.side.dead(ctx, k.t.c, rest); err != nil {
				return nil, fmt.Errorf("audit: reading consumer %q's dead letters (%s): %w", name, k.t.side.dialect, err)
			}
		}
		applied[name], dead[name] = ap, dl
	}
	// Classify; collect the rows missing somewhere.
	type miss struct {
		p         published
		consumers []string
		deadAt    []string // consumers of its topic that dead-lettered it
	}
	var missing []*miss
	for _, p := range keep {
		if p.msgID == "" {
			continue
		}
		var m *miss
		for _, t := range a.byTopic[p.topic] {
			if _, isBlind := blind[t.c.Name]; isBlind {
				continue
			}
			r := rows[rowKey{p.topic, t.c.Name}]
			rec, ok := applied[t.c.Name][p.msgID]
			switch {
			case ok && rec.done:
				r.Applied++
				r.lat.observe(rec.at.Sub(time.UnixMilli(p.created)))
			case dead[t.c.Name][p.msgID] != 0:
				r.DeadLettered++
				if m == nil {
					m = &miss{p: p}
				}
				m.deadAt = append(m.deadAt, t.c.Name)
			case ok || p.publishedAt >= missBefore:
				r.InFlight++ // a claim in progress, or still within grace
			default:
				if m == nil {
					m = &miss{p: p}
				}
				m.consumers = append(m.consumers, t.c.Name)
			}
		}
		if m != nil && len(m.consumers) > 0 {
			missing = append(missing, m)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(missing))
	for i, m := range missing {
		ids[i] = m.p.id
	}
	prior, err := a.repairsOf(ctx, ids)
	if err != nil {
		return nil, err
	}
	now := a.cfg.Now()
	var fix []*miss
	for _, m := range missing {
		pr := prior[m.p.id]
		recent := pr.count > 0 && now.Sub(time.UnixMilli(pr.last)) < a.cfg.Grace
		for _, name := range m.consumers {
			r := rows[rowKey{m.p.topic, name}]
			if recent {
				r.InFlight++
				r.Repairing++
				continue
			}
			r.Missing++
			if len(r.MissingIDs) < a.cfg.Examples {
				r.MissingIDs = append(r.MissingIDs, m.p.msgID)
			}
		}
		if !recent && len(m.deadAt) == 0 && pr.count < a.cfg.MaxRepairsPerMessage && *budget > 0 && !a.anyBlind(m.p.topic, blind) {
			*budget--
			fix = append(fix, m)
		}
	}
	var done []Repair
	for _, m := range fix {
		rp := Repair{OrigID: m.p.id, MsgID: m.p.msgID, Topic: m.p.topic, Consumers: m.consumers, At: now,
			Reason: fmt.Sprintf("published %s, not applied or dead-lettered by %s after the %v grace",
				time.UnixMilli(m.p.publishedAt).UTC().Format(time.RFC3339), strings.Join(m.consumers, ", "), a.cfg.Grace)}
		copyID, err := a.repair(ctx, rp)
		if err != nil {
			return done, fmt.Errorf("audit: republishing outbox row %d (%s): %w", m.p.id, a.producerD, err)
		}
		if copyID == 0 {
			continue // no longer published (an operator, a cleanup): nothing to copy
		}
		rp.CopyID = copyID
		done = append(done, rp)
		a.m.Repaired(rp.Topic)
		a.cfg.Logger.Info("audit: republished a missing message", "msg_id", rp.MsgID, "topic", rp.Topic, "orig_id", rp.OrigID, "copy_id", rp.CopyID, "consumers", rp.Consumers)
	}
	return done, nil
}

func (a *Auditor) anyBlind(topic string, blind map[string]string) bool {
	for _, t := range a.byTopic[topic] {
		if _, ok := blind[t.c.Name]; ok {
			return true
		}
	}
	return false
}

// Loop runs an audit every interval until ctx ends, and hands each report (and
// its error) to each, which may be nil. It returns ctx's error.
func (a *Auditor) Loop(ctx context.Context, interval time.Duration, each func(*Report, error)) error {
	if interval <= 0 {
		return &idem.InputError{Field: "audit.Auditor.Loop interval", Reason: fmt.Sprintf("is %v", interval), Fix: "give a positive duration, e.g. 1m"}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rep, err := a.Run(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if each != nil {
			each(rep, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func dedupe(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

func metricRows(rows []Row) []metrics.AuditRow {
	out := make([]metrics.AuditRow, len(rows))
	for i, r := range rows {
		ratio := -1.0
		if d := r.Deliveries; d != nil && d.Processed+d.Duplicates > 0 {
			ratio = float64(d.Duplicates) / float64(d.Processed+d.Duplicates)
		}
		out[i] = metrics.AuditRow{Topic: r.Topic, Consumer: r.Consumer, DupRatio: ratio,
			Counts: map[string]int64{"published": r.Published, "applied": r.Applied, "dead_lettered": r.DeadLettered,
				"missing": r.Missing, "in_flight": r.InFlight, "republished": r.Republished},
			Latency: map[string]time.Duration{"0.5": r.Latency.P50, "0.9": r.Latency.P90, "0.99": r.Latency.P99, "1": r.Latency.Max}}
	}
	return out
}
