package idem_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeEnvs declares, for each Go snippet of README.md (known by a call it makes),
// the names it uses without declaring them: the parameters of the function it is
// compiled in. A snippet without an entry fails the test, which says so.
var readmeEnvs = []struct{ has, params string }{
	{"idemsqlite.Open(ctx, ", "ctx context.Context, invoiceID string, chargeCard func(context.Context, string) ([]byte, error)"},
	{`"ledger-consumer"`, "ctx context.Context, pool *pgxpool.Pool, store *idempg.Store, msg struct{ ID, Account string; Amount int64 }"},
	{"idemnats.NewSource(", "ctx context.Context, js jetstream.JetStream, pool *pgxpool.Pool"},
	{"outbox.New(", "ctx context.Context, pool *pgxpool.Pool, customerID string, body []byte, natsSink idem.Sink"},
	{"effect.New(", "ctx context.Context, sqlDB *sql.DB, orderID string, amount int64, payments interface{ Charge(context.Context, string, int64) ([]byte, error) }"},
	{"stream.NewSQLStore(", "ctx context.Context, sqlDB *sql.DB, userOf func(*http.Request) string"},
	{"idemseq.OpenSQL(", "ctx context.Context, db *sql.DB, msg struct{ Producer string; Epoch, Seq uint64 }"},
}

// readmeImports maps the package names a snippet may use to their paths.
var readmeImports = map[string]string{
	"context": "context", "errors": "errors", "sql": "database/sql", "json": "encoding/json", "http": "net/http", "time": "time",
	"idem": "github.com/idemhq/idem", "idemsqlite": "github.com/idemhq/idem/idemsqlite",
	"idempg": "github.com/idemhq/idem/idempg", "idemnats": "github.com/idemhq/idem/idemnats",
	"idemseq": "github.com/idemhq/idem/idemseq", "inbox": "github.com/idemhq/idem/inbox",
	"outbox": "github.com/idemhq/idem/outbox", "effect": "github.com/idemhq/idem/effect",
	"stream": "github.com/idemhq/idem/stream", "pgx": "github.com/jackc/pgx/v5",
	"pgxpool": "github.com/jackc/pgx/v5/pgxpool", "jetstream": "github.com/nats-io/nats.go/jetstream",
}

var goBlockRE = regexp.MustCompile("(?s)```go\n(.*?)```")

// Every Go snippet of README.md compiles against today's API: a renamed field or a
// changed signature fails this test, not the reader. Each snippet is compiled as the
// body of a function whose parameters are what readmeEnvs says it uses, through a
// build overlay (nothing is written to the tree). Locals and imports a snippet leaves
// unused are allowed: a snippet shows a step, not a whole program.
func TestReadmeSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the README's snippets with the go command")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	blocks := goBlockRE.FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go blocks: the pattern no longer matches")
	}
	for i, b := range blocks {
		code := b[1]
		params, ok := "", false
		for _, e := range readmeEnvs {
			if strings.Contains(code, e.has) {
				params, ok = e.params, true
				break
			}
		}
		if !ok {
			t.Errorf("README.md Go snippet %d (starting %q) has no entry in readmeEnvs: declare the names it uses", i+1, firstLine(code))
			continue
		}
		var src bytes.Buffer
		fmt.Fprintf(&src, "package snippet%d\n\nimport (\n", i+1)
		for name, path := range readmeImports {
			if regexp.MustCompile(`\b` + name + `\.`).MatchString(code + params) {
				fmt.Fprintf(&src, "\t%s %q\n", name, path)
			}
		}
		fmt.Fprintf(&src, ")\n\ntype Order struct {\n\tAmount  int64\n\tAccount string\n}\n\nfunc _(%s) {\n%s}\n", params, code)
		file := filepath.Join(dir, fmt.Sprintf("snippet%d.go", i+1))
		if err := os.WriteFile(file, src.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		pkg := fmt.Sprintf("internal/readmesnippets/snippet%d", i+1)
		overlay[filepath.Join(root, pkg, "snippet.go")] = file
		pkgs = append(pkgs, "./"+pkg)
	}
	ov, _ := json.Marshal(map[string]any{"Replace": overlay})
	ovFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ovFile, ov, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"build", "-gcflags=-e", "-overlay", ovFile}, pkgs...)...)
	out, _ := cmd.CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case line == "", strings.HasPrefix(line, "# "),
			strings.Contains(line, "declared and not used"), strings.Contains(line, "imported and not used"):
			continue
		}
		t.Errorf("a README.md snippet does not compile: %s", strings.ReplaceAll(line, dir+string(filepath.Separator), ""))
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
