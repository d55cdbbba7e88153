package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/effect/saga"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idempg/pgcdc"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/queue"
	"github.com/idemhq/idem/stream"
)

// recorder is a Registerer that notes the name of every metric registered through
// it, and which are histograms (whose series carry _bucket, _sum and _count). It
// reads the descriptors, not Gather: a vector with no child yet gathers nothing.
type recorder struct {
	reg        *prometheus.Registry
	names      map[string]bool
	descs      map[string]string // name -> the descriptor's text (help, labels)
	histograms map[string]bool
}

var fqNameRE = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	descs := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(descs); close(descs) }()
	_, hist := c.(prometheus.Histogram)
	_, histVec := c.(*prometheus.HistogramVec)
	for d := range descs {
		m := fqNameRE.FindStringSubmatch(d.String())
		if m == nil {
			return fmt.Errorf("no fqName in %s", d)
		}
		r.names[m[1]] = true
		if r.descs != nil {
			r.descs[m[1]] = d.String()
		}
		if hist || histVec {
			r.histograms[m[1]] = true
		}
	}
	return r.reg.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recorder) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

// registered builds every idem component that exports metrics, through its own
// constructor, on one recorder: the names idem really exports.
func registered(t *testing.T) *recorder {
	t.Helper()
	ctx := context.Background()
	r := &recorder{reg: prometheus.NewRegistry(), names: map[string]bool{}, descs: map[string]string{}, histograms: map[string]bool{}}
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// Stores (every backend registers through these), the inbox, the relay (with
	// the outbox's backlog gauges), the HTTP middleware and the gRPC interceptor.
	_, err := metrics.NewStore(r, "test")
	check("store metrics", err)
	check("records gauge", metrics.RecordsFunc(r, "test", func() float64 { return 0 }))
	_, err = metrics.NewInbox(r, "test")
	check("inbox metrics", err)
	_, err = metrics.NewRelay(r, func() (float64, float64, float64) { return 0, 0, 0 })
	check("relay metrics", err)
	_, err = metrics.NewHTTP(r)
	check("http metrics", err)
	_, err = metrics.NewGRPC(r)
	check("grpc metrics", err)
	check("build info", metrics.NewBuild(r, "v0.0.0", "", "go"))
	_, err = metrics.NewAudit(r) // package audit's runs
	check("audit metrics", err)
	check("audit interval", metrics.AuditInterval(r, time.Minute)) // idem audit --every
	_, err = idemmem.New(idemmem.Config{Registerer: r})
	check("idemmem", err)
	_, err = pgcdc.New("postgres://relay@127.0.0.1:5432/db", nopSink{}, pgcdc.Config{Registerer: r}) // connects only when run
	check("cdc relay", err)
	db := sqltest.SQLite(t)
	_, err = effect.New(ctx, db, effect.Config{Registerer: r, KeyedWriteBehind: true}) // idem_effects_deferred too
	check("effect fence", err)
	_, err = saga.New(ctx, db, saga.Config{Registerer: r}, saga.Definition{Name: "s", Steps: []saga.Step{{Name: "a", NoCompensation: true,
		Action: func(context.Context, saga.Input) ([]byte, error) { return nil, nil }}}})
	check("saga orchestrator", err)
	_, err = effect.NewSweeper(ctx, db, effect.SweepConfig{Registerer: r})
	check("effect sweeper", err)
	_, err = saga.NewSweeper(ctx, db, saga.SweepConfig{Registerer: r})
	check("saga sweeper", err)
	_, err = admin.New(admin.Config{Insecure: true, Registerer: r})
	check("admin", err)
	_, err = queue.New(ctx, db, queue.Config{Registerer: r})
	check("queue", err)
	store, err := stream.NewSQLStore(ctx, db, stream.SQLConfig{})
	check("stream store", err)
	srv, err := stream.NewServer(store, stream.ServerConfig{AllowAnonymous: true, Registerer: r})
	check("stream server", err)
	t.Cleanup(func() { srv.Close() })
	return r
}

// nopSink is the CDC relay's sink in registered: it is never run.
type nopSink struct{}

func (nopSink) Publish(context.Context, ...idem.Message) error { return nil }

// exported reports whether a series name in a query is one idem exports: a
// metric's name, or a histogram's with its series suffix.
func (r *recorder) exported(name string) bool {
	if r.names[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && r.histograms[base] {
			return true
		}
	}
	return false
}

var (
	stringRE   = regexp.MustCompile(`"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'`)
	matcherRE  = regexp.MustCompile(`\{[^{}]*\}`)
	rangeRE    = regexp.MustCompile(`\[[^\[\]]*\]`)
	groupingRE = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	identRE    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	keywords   = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "Inf": true, "NaN": true,
		"group_left": true, "group_right": true}
)

// seriesNames returns the metric names a PromQL expression selects: identifiers
// that are not functions, keywords, label names (in matchers, by, on) or
// durations. It is no parser, but it errs towards reporting too much, which fails.
func seriesNames(expr string) ([]string, error) {
	e := stringRE.ReplaceAllString(expr, `""`)
	if strings.Count(e, "(") != strings.Count(e, ")") || strings.Count(e, "{") != strings.Count(e, "}") ||
		strings.Count(e, "[") != strings.Count(e, "]") {
		return nil, fmt.Errorf("unbalanced brackets in %q", expr)
	}
	e = matcherRE.ReplaceAllString(e, " ")
	e = rangeRE.ReplaceAllString(e, " ")
	e = groupingRE.ReplaceAllString(e, " ")
	var out []string
	for _, loc := range identRE.FindAllStringIndex(e, -1) {
		id := e[loc[0]:loc[1]]
		if loc[0] > 0 && (e[loc[0]-1] >= '0' && e[loc[0]-1] <= '9' || e[loc[0]-1] == '.') {
			continue // the exponent or unit of a number: 1e3, 0.5
		}
		if keywords[id] || strings.HasPrefix(strings.TrimSpace(e[loc[1]:]), "(") {
			continue
		}
		out = append(out, id)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no metric in %q", expr)
	}
	return out, nil
}

func TestSeriesNames(t *testing.T) {
	t.Parallel()
	got, err := seriesNames(`histogram_quantile(0.99, sum by (le, backend) (rate(idem_claim_duration_seconds_bucket{job=~"$job", x="a}b"}[$__rate_interval])))
		/ on (job) group_left clamp_min(up, 1) > bool 1e3 and absent(idem_records offset 5m)`)
	want := []string{"idem_claim_duration_seconds_bucket", "up", "idem_records"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("seriesNames = %v, %v; want %v", got, err, want)
	}
	if _, err := seriesNames(`sum(rate(idem_claims_total[5m])`); err == nil {
		t.Fatal("an unbalanced expression passed")
	}
}

// checkExpr fails t for every series of expr that idem does not export.
func checkExpr(t *testing.T, r *recorder, where, expr string) {
	t.Helper()
	names, err := seriesNames(expr)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	for _, n := range names {
		if !r.exported(n) {
			t.Errorf("%s: %q is not a metric idem exports (expr %s)", where, n, expr)
		}
	}
}

// Every query of the dashboard names metrics idem exports.
func TestDashboardUsesExportedMetrics(t *testing.T) {
	t.Parallel()
	r := registered(t)
	data, err := os.ReadFile("grafana/idem.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("grafana/idem.json: %v", err)
	}
	var vars []string
	for _, v := range dash.Templating.List {
		vars = append(vars, v.Name)
	}
	if dash.UID == "" || !slices.Contains(vars, "job") || !slices.Contains(vars, "instance") {
		t.Fatalf("dashboard uid %q, variables %v: want a uid and the job and instance variables", dash.UID, vars)
	}
	queries := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			if !strings.Contains(tg.Expr, `job=~"$job"`) || !strings.Contains(tg.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q: %s is not filtered by $job and $instance", p.Title, tg.Expr)
			}
			checkExpr(t, r, "panel "+p.Title, tg.Expr)
		}
	}
	if queries < 10 {
		t.Fatalf("%d queries in the dashboard", queries)
	}
}

// rule is one alert rule of alerts.yml.
type rule struct {
	alert, expr, severity string
	line                  int
}

// parseRules reads alerts.yml strictly enough for the shape it must have (groups
// of rules, each an alert with one expr, inline or a | block, a severity label):
// go.mod has no YAML library, and this file is small.
func parseRules(t *testing.T, path string) []rule {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rules []rule
	var cur *rule
	blockIndent := -1 // inside an expr: | block, the indent of its key
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.Contains(line, "\t") {
			t.Fatalf("%s:%d: a tab (YAML indents with spaces)", path, n)
		}
		trimmed := strings.TrimSpace(line)
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if blockIndent >= 0 {
			if trimmed == "" || indent > blockIndent {
				cur.expr += trimmed + "\n"
				continue
			}
			blockIndent = -1
		}
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		key, value, ok := strings.Cut(strings.TrimPrefix(trimmed, "- "), ":")
		if !ok {
			t.Fatalf("%s:%d: %q is not a key: value line", path, n, trimmed)
		}
		value = strings.TrimSpace(value)
		switch key {
		case "alert":
			rules = append(rules, rule{alert: value, line: n})
			cur = &rules[len(rules)-1]
		case "expr":
			if cur == nil || cur.expr != "" {
				t.Fatalf("%s:%d: an expr outside an alert, or a second one", path, n)
			}
			if value == "|" {
				blockIndent = indent
			} else {
				cur.expr = value
			}
		case "severity":
			if cur == nil {
				t.Fatalf("%s:%d: severity outside an alert", path, n)
			}
			cur.severity = value
		case "for":
			if !regexp.MustCompile(`^[0-9]+[smh]$`).MatchString(value) {
				t.Fatalf("%s:%d: for: %q is not a duration", path, n, value)
			}
		case "groups", "name", "rules", "labels", "annotations", "summary", "description":
		default:
			t.Fatalf("%s:%d: unexpected key %q", path, n, key)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rules
}

// Every alert has an expression naming metrics idem exports, a severity, and its
// own name; together they cover what the operators asked for.
func TestAlertsUseExportedMetrics(t *testing.T) {
	t.Parallel()
	r := registered(t)
	rules := parseRules(t, "prometheus/alerts.yml")
	seen := map[string]bool{}
	for _, rl := range rules {
		where := fmt.Sprintf("alerts.yml:%d %s", rl.line, rl.alert)
		switch {
		case rl.alert == "" || seen[rl.alert]:
			t.Errorf("%s: empty or repeated alert name", where)
		case strings.TrimSpace(rl.expr) == "":
			t.Errorf("%s: no expr", where)
		case !slices.Contains([]string{"info", "warning", "critical"}, rl.severity):
			t.Errorf("%s: severity %q, want info, warning or critical", where, rl.severity)
		}
		seen[rl.alert] = true
		checkExpr(t, r, where, rl.expr)
	}
	for _, want := range []string{"IdemOutboxBacklogOld", "IdemOutboxParked", "IdemDeadLettersRising", "IdemDuplicateRatioSpike",
		"IdemRelayAbsent", "IdemRelayStalled", "IdemLeaseTakeoversRising", "IdemStreamLag", "IdemCDCParked", "IdemCDCStalled",
		"IdemAuditMissing", "IdemAuditStale", "IdemQueueStuck"} {
		if !seen[want] {
			t.Errorf("no alert %s", want)
		}
	}
}
