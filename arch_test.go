package idem_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The layering ARCHITECTURE.md describes, checked on the source: a rule that only
// a document states is one a later change breaks without noticing.

const module = "github.com/idemhq/idem"

// components are the packages that run statements on idem's own tables through a
// driver: they hold no SQL text and never ask which database they run on.
var components = []string{"inbox", "outbox", "queue", "effect", "effect/saga", "stream", "idemseq", "audit"}

// drivers own the statements of one database each.
var drivers = []string{"idempg", "idemsqlite", "idemmysql"}

// sqlText is what a statement looks like inside a string literal.
var sqlText = regexp.MustCompile(`(?i)\b(SELECT\s.+\sFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX)|ON\s+CONFLICT|FOR\s+UPDATE)\b`)

type parsed struct {
	files   map[string]*ast.File // non-test files of one directory
	imports map[string]bool
}

func parseDir(t *testing.T, dir string) parsed {
	t.Helper()
	p := parsed{files: map[string]*ast.File{}, imports: map[string]bool{}}
	entries, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range entries {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		p.files[name] = f
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			p.imports[path] = true
		}
	}
	return p
}

func TestRootIsTheVocabulary(t *testing.T) {
	for path := range parseDir(t, ".").imports {
		if strings.HasPrefix(path, module+"/") {
			t.Errorf("the root imports %s: the root is the vocabulary every package imports, so it imports none of them", path)
		}
	}
}

func TestComponentsHoldNoSQL(t *testing.T) {
	for _, c := range components {
		p := parseDir(t, c)
		if len(p.files) == 0 {
			t.Fatalf("no Go files in %s", c)
		}
		for _, d := range drivers {
			if p.imports[module+"/"+d] {
				t.Errorf("%s imports the driver %s: components reach a database through idemsql.TxDB's Driver", c, d)
			}
		}
		for name, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.KeyValueExpr:
					// An error's Fix may tell a person what to run.
					if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Fix" {
						return false
					}
				case *ast.BasicLit:
					if n.Kind == token.STRING && sqlText.MatchString(n.Value) {
						t.Errorf("%s holds SQL text %.60s…: statements belong to a driver's family (idemsql)", name, n.Value)
					}
				case *ast.BinaryExpr:
					if (n.Op == token.EQL || n.Op == token.NEQ) && (isDialectCall(n.X) || isDialectCall(n.Y)) {
						t.Errorf("%s compares Dialect(): what differs between databases is a family field of the driver", name)
					}
				case *ast.SwitchStmt:
					if isDialectCall(n.Tag) {
						t.Errorf("%s switches on Dialect(): what differs between databases is a family field of the driver", name)
					}
				}
				return true
			})
		}
	}
}

func isDialectCall(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Dialect"
}

// TestClientsLinkNoServer: an application that uses the NATS adapter links the
// client, not a server: the embedded server has a package of its own.
func TestClientsLinkNoServer(t *testing.T) {
	seen := map[string]bool{}
	var walk func(dir string)
	walk = func(dir string) {
		if seen[dir] {
			return
		}
		seen[dir] = true
		for path := range parseDir(t, dir).imports {
			switch {
			case strings.Contains(path, "nats-server"):
				t.Errorf("idemnats links %s (through %s): the embedded server lives in its own package", path, dir)
			case strings.HasPrefix(path, module+"/"):
				walk(strings.TrimPrefix(path, module+"/"))
			}
		}
	}
	walk("idemnats")
}

// requestLayers guard requests and calls through any Store or TxStore: they reach a
// database only through idemsql.TxDB, never a driver of their own.
var requestLayers = []string{"idemhttp", "idemhttp/gateway", "idemgrpc", "webhook"}

func TestRequestLayersImportNoDriver(t *testing.T) {
	for _, c := range requestLayers {
		p := parseDir(t, c)
		if len(p.files) == 0 {
			t.Fatalf("no Go files in %s", c)
		}
		for _, d := range append(drivers, "idemmem", "idemredis") {
			if p.imports[module+"/"+d] {
				t.Errorf("%s imports %s: a request layer takes its store as an idem.Store or idem.TxStore", c, d)
			}
		}
	}
}
