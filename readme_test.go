package idem_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// docFiles are the pages whose Go snippets must compile and whose relative links
// must lead somewhere: README.md, the pointers SECURITY.md and SCALING.md, and every
// page of docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("docs/ has no .md pages: the glob no longer matches")
	}
	return append([]string{"README.md", "SECURITY.md", "SCALING.md"}, pages...)
}

// readmeEnvs declares, for each Go snippet of README.md and docs/*.md that is not a
// whole file (known by a call it makes, which must match exactly one entry), the
// names it uses without declaring them: the parameters of the function it is
// compiled in. A snippet without an entry, or with two, fails the test, which says
// so. A snippet that starts with "package " is a whole file and is compiled as it is.
var readmeEnvs = []struct{ has, params string }{
	// README.md, the ten-minute path.
	{`client.Post("http://127.0.0.1:8000/orders"`, "ctx context.Context"},
	{"idemhttp.AtomicMiddleware(txdb, store,", "ctx context.Context, sqlDB *sql.DB, store *idemsqlite.Store, mux *http.ServeMux, js jetstream.JetStream"},
	{`Durable: "billing"`, "ctx context.Context, sqlDB *sql.DB, txdb idemsql.TxDB[*sql.Tx], store *idemsqlite.Store, js jetstream.JetStream, payments interface{ Charge(context.Context, string) ([]byte, error) }"},
	// docs/stores.md
	{"idemsqlite.Open(ctx, ", "ctx context.Context, invoiceID string, chargeCard func(context.Context, string) ([]byte, error)"},
	{`"ledger-consumer"`, "ctx context.Context, pool *pgxpool.Pool, store *idempg.Store, msg struct{ ID, Account string; Amount int64 }"},
	{"idemseq.OpenSQL(", "ctx context.Context, db *sql.DB, msg struct{ Producer string; Epoch, Seq uint64 }"},
	// docs/http.md
	{"idemhttp.Middleware(idemhttp.Config{", "ctx context.Context, store idem.Store, mux *http.ServeMux"},
	{"idemhttp.AtomicMiddleware(db,", "ctx context.Context, sqlDB *sql.DB, store *idemsqlite.Store"},
	{"idemhttp.WithKey(", "ctx context.Context, msg idem.Message, shipmentsURL string"},
	{"KeyJSONField: \"id\"", "ctx context.Context, store idem.Store, mux *http.ServeMux, verified func(http.Handler) http.Handler, handle http.Handler"},
	// docs/inbox.md
	{"idemnats.NewSource(ctx, js, idemnats.SourceConfig{Stream: \"ORDERS\", Durable: \"ledger\"", "ctx context.Context, js jetstream.JetStream, pool *pgxpool.Pool"},
	{"inbox.NewBatch(ctx, src, idempg.TxDB(pool)", "ctx context.Context, src idem.Source, pool *pgxpool.Pool, store *idempg.Store"},
	// docs/outbox.md
	{"outbox.New(ctx, idempg.TxDB(pool)", "ctx context.Context, pool *pgxpool.Pool, customerID string, body []byte, natsSink idem.Sink"},
	// docs/effects.md
	{"effect.Config{Lease: 30 * time.Second}", "ctx context.Context, sqlDB *sql.DB, orderID string, amount int64, payments interface{ Charge(context.Context, string, int64) ([]byte, error) }"},
	{"effect.Config{KeyedWriteBehind: true}", "ctx context.Context, db idemsql.TxDB[*sql.Tx], charge effect.Call"},
	{"fence.DoKeyedTx(ctx, tx, orderID,", "ctx context.Context, db idemsql.TxDB[*sql.Tx], fence *effect.Fence[*sql.Tx], orderID string, chargeCall effect.Call"},
	{"fence.Do(callCtx,", "ctx context.Context, pool *pgxpool.Pool, src idem.Source, store *idempg.Store, payments interface{ Charge(context.Context, string) ([]byte, error) }"},
	{"saga.New(ctx, txdb,", "ctx context.Context, txdb idemsql.TxDB[*sql.Tx], src idem.Source, store *idemsqlite.Store, payments interface {\n\tCharge(context.Context, string) ([]byte, error)\n\tRefund(context.Context, string) error\n}"},
	// docs/audit.md
	{"audit.ConsumersIn(ledgerDB,", "ctx context.Context, ledgerSQL *sql.DB, pool *pgxpool.Pool"},
	// docs/queue.md
	{"q.Source(queue.SourceConfig{", "ctx context.Context, pool *pgxpool.Pool, customerID string, body []byte, store *idempg.Store, applyOrder inbox.Handler[pgx.Tx]"},
	// docs/stream.md
	{"stream.NewSQLStore(", "ctx context.Context, sqlDB *sql.DB, userOf func(*http.Request) string"},
	// docs/grpc.md: each is also the body of a function of idemgrpc/doc_example_test.go
	{"grpc.ChainUnaryInterceptor(auth, once)", "ctx context.Context, store idem.Store, auth grpc.UnaryServerInterceptor, orders orderspb.OrdersServer, lis net.Listener"},
	{"grpc.WithDefaultServiceConfig(retryPolicy)", "ctx context.Context, addr string, creds credentials.TransportCredentials"},
	{"metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey", "ctx context.Context, orders orderspb.OrdersClient, orderKey string"},
	{"idemgrpc.AtomicUnaryServerInterceptor(db, store,", "ctx context.Context, store *idemsqlite.Store, orders orderspb.OrdersServer, lis net.Listener"},
	{"Scope: func(ctx context.Context)", "ctx context.Context, store idem.Store, userFrom func(context.Context) (string, bool)"},
	{`RequestField: "request_id",`, "ctx context.Context, store idem.Store"},
	// docs/webhooks.md
	{"webhook.Receiver(webhook.Config{", "ctx context.Context, store idem.Store, mux *http.ServeMux, fulfil func(context.Context, string, []byte) error"},
	{"webhook.AtomicReceiver(txdb, store,", "ctx context.Context, store *idemsqlite.Store, mux *http.ServeMux"},
}

// readmeImports maps the package names a snippet may use to their paths.
var readmeImports = map[string]string{
	"context": "context", "errors": "errors", "sql": "database/sql", "json": "encoding/json", "http": "net/http", "time": "time",
	"fmt": "fmt", "io": "io", "log": "log", "strings": "strings",
	"idem": "github.com/idemhq/idem", "idemsqlite": "github.com/idemhq/idem/idemsqlite", "idemsql": "github.com/idemhq/idem/idemsql",
	"idempg": "github.com/idemhq/idem/idempg", "idemnats": "github.com/idemhq/idem/idemnats",
	"idemseq": "github.com/idemhq/idem/idemseq", "inbox": "github.com/idemhq/idem/inbox",
	"outbox": "github.com/idemhq/idem/outbox", "effect": "github.com/idemhq/idem/effect",
	"saga": "github.com/idemhq/idem/effect/saga", "idemhttp": "github.com/idemhq/idem/idemhttp",
	"idemkey": "github.com/idemhq/idem/idemkey", "webhook": "github.com/idemhq/idem/webhook", "os": "os",
	"stream": "github.com/idemhq/idem/stream", "pgx": "github.com/jackc/pgx/v5",
	"pgxpool": "github.com/jackc/pgx/v5/pgxpool", "jetstream": "github.com/nats-io/nats.go/jetstream",
	"net": "net", "grpc": "google.golang.org/grpc", "codes": "google.golang.org/grpc/codes",
	"credentials": "google.golang.org/grpc/credentials", "metadata": "google.golang.org/grpc/metadata",
	"status": "google.golang.org/grpc/status", "idemgrpc": "github.com/idemhq/idem/idemgrpc",
	"orderspb": "github.com/idemhq/idem/internal/orderspb", "audit": "github.com/idemhq/idem/audit",
	"queue": "github.com/idemhq/idem/queue",
}

var goBlockRE = regexp.MustCompile("(?s)```go\n(.*?)```")

// snippet is one ```go block of a page.
type snippet struct {
	page string
	n    int // 1-based, within its page
	code string
}

func (s snippet) String() string {
	return fmt.Sprintf("%s Go snippet %d (starting %q)", s.page, s.n, firstLine(s.code))
}

// snippetSource is the file a snippet is compiled as: a whole file as it is, else
// the body of a function whose parameters are its readmeEnvs entry's.
func snippetSource(s snippet, pkg string) (string, error) {
	if strings.HasPrefix(s.code, "package ") {
		// A whole file is what a reader saves and runs: it is gofmt'ed as shown.
		if formatted, err := format.Source([]byte(s.code)); err == nil && string(formatted) != s.code {
			return "", fmt.Errorf("%s is a whole file that gofmt would change: format it", s)
		}
		return s.code, nil
	}
	var params []string
	for _, e := range readmeEnvs {
		if strings.Contains(s.code, e.has) {
			params = append(params, e.params)
		}
	}
	switch len(params) {
	case 0:
		return "", fmt.Errorf("%s has no entry in readmeEnvs: declare the names it uses", s)
	case 1:
	default:
		return "", fmt.Errorf("%s matches %d entries of readmeEnvs: make their has strings tell them apart", s, len(params))
	}
	var src bytes.Buffer
	fmt.Fprintf(&src, "package %s\n\nimport (\n", pkg)
	names := make([]string, 0, len(readmeImports))
	for name := range readmeImports {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if regexp.MustCompile(`\b` + name + `\.`).MatchString(s.code + params[0]) {
			fmt.Fprintf(&src, "\t%s %q\n", name, readmeImports[name])
		}
	}
	fmt.Fprintf(&src, ")\n\ntype Order struct {\n\tAmount  int64\n\tAccount string\n}\n\nfunc _(%s) error {\n%s\treturn nil\n}\n", params[0], s.code)
	return src.String(), nil
}

// Every Go snippet of README.md and docs/*.md compiles against today's API: a
// renamed field or a changed signature fails this test, not the reader. Each snippet
// is compiled as its own package through a build overlay (nothing is written to the
// tree): a whole file as it is, any other as the body of a function whose parameters
// are what readmeEnvs says it uses. Locals and imports a snippet leaves unused are
// allowed: a snippet shows a step, not a whole program.
func TestReadmeSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the docs' snippets with the go command")
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var snippets []snippet
	for _, page := range docFiles(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range goBlockRE.FindAllStringSubmatch(string(text), -1) {
			snippets = append(snippets, snippet{page: page, n: i + 1, code: b[1]})
		}
	}
	if len(snippets) == 0 {
		t.Fatal("README.md and docs/*.md have no ```go blocks: the pattern no longer matches")
	}
	dir := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	where := map[string]snippet{} // the package's directory → its snippet, for the errors
	for i, s := range snippets {
		pkg := fmt.Sprintf("snippet%d", i+1)
		src, err := snippetSource(s, pkg)
		if err != nil {
			t.Error(err)
			continue
		}
		file := filepath.Join(dir, pkg+".go")
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		rel := filepath.Join("internal", "readmesnippets", pkg)
		overlay[filepath.Join(root, rel, "snippet.go")] = file
		pkgs = append(pkgs, "./"+rel)
		where[rel] = s
	}
	ov, _ := json.Marshal(map[string]any{"Replace": overlay})
	ovFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ovFile, ov, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"build", "-gcflags=-e", "-overlay", ovFile}, pkgs...)...)
	out, _ := cmd.CombinedOutput()
	current := ""
	for _, line := range strings.Split(string(out), "\n") {
		if pkg, ok := strings.CutPrefix(line, "# "); ok {
			current = pkg
			continue
		}
		if line == "" || strings.Contains(line, "declared and not used") || strings.Contains(line, "imported and not used") {
			continue
		}
		s := where[filepath.Join("internal", "readmesnippets", filepath.Base(current))]
		t.Errorf("%s does not compile: %s", s, strings.ReplaceAll(line, dir+string(filepath.Separator), ""))
	}
}

// pendingLinks are files a link may name before they exist: none now. A sibling
// branch that adds a linked file can list it here until it lands.
var pendingLinks = map[string]bool{}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link of README.md and docs/*.md leads to a file or directory of the
// tree, and a link to a heading of a Markdown page (page.md#anchor) to a heading
// that page has: moving a section breaks this test, not the reader's click.
func TestDocLinksResolve(t *testing.T) {
	for _, page := range docFiles(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range linkRE.FindAllStringSubmatch(stripCode(string(text)), -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(link, "#")
			target := page
			if path != "" {
				target = filepath.Clean(filepath.Join(filepath.Dir(page), path))
			}
			if _, err := os.Stat(target); err != nil {
				if pendingLinks[filepath.ToSlash(target)] {
					t.Logf("%s links to %s, which a sibling branch adds", page, link)
					continue
				}
				t.Errorf("%s links to %s: %s does not exist", page, link, target)
				continue
			}
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			body, err := os.ReadFile(target)
			if err != nil {
				t.Fatal(err)
			}
			if !headingAnchors(string(body))[anchor] {
				t.Errorf("%s links to %s: %s has no heading with the anchor #%s", page, link, target, anchor)
			}
		}
	}
}

var fenceRE = regexp.MustCompile("(?s)```.*?```")

// stripCode removes fenced code blocks, whose brackets are code, not links.
func stripCode(s string) string { return fenceRE.ReplaceAllString(s, "") }

// headingAnchors returns the anchors GitHub gives the headings of a Markdown page:
// lower case, punctuation but '-' and '_' dropped, spaces as '-', and "-1", "-2"…
// after a repeated one.
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(stripCode(md), "\n") {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && !strings.ContainsRune("→–—…·", r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
