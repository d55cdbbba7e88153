package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/idemhq/idem"
)

// scopesJSON is the --json document of `idem keys scopes`.
type scopesJSON struct {
	Store  string   `json:"store"`
	Scopes []string `json:"scopes"`
	Next   string   `json:"next"`
}

// keys scopes pages through the scopes of every store: each once on SQL stores, at
// least once on Redis; garbage cursors and limits exit 2; keys list without
// --scope lists every scope's records; keys get without --scope points at scopes.
func TestKeysScopes(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"sqlite", "postgres", "mysql", "redis"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ks := newKeysStore(t, name)
			want := []string{"anonymous", "auth:0f", "cred:1a", "cred:1ab", "tenant:a%_*?[x]"}
			for _, sc := range want {
				for i := range 3 {
					if _, err := ks.store.Claim(ctx, idem.Claim{Key: idem.Key{Scope: sc, ID: fmt.Sprintf("k%d", i)}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			seen := map[string]int{}
			cursor := ""
			for pages := 0; ; pages++ {
				if pages > 1000 {
					t.Fatalf("keys scopes did not end after %d pages", pages)
				}
				var page scopesJSON
				decode(t, mustRun(t, "keys", "scopes", "--store", ks.url, "--limit", "2", "--cursor", cursor, "--json"), &page)
				if len(page.Scopes) > 2 || page.Scopes == nil {
					t.Fatalf("page %+v", page)
				}
				for _, sc := range page.Scopes {
					seen[sc]++
				}
				if cursor = page.Next; cursor == "" {
					break
				}
			}
			for _, sc := range want {
				if seen[sc] == 0 || (name != "redis" && seen[sc] != 1) {
					t.Fatalf("scope %q listed %d times (all: %v)", sc, seen[sc], seen)
				}
			}
			if name != "redis" && len(seen) != len(want) {
				t.Fatalf("scopes %v, want %v", seen, want)
			}

			out := mustRun(t, "keys", "scopes", "--store", ks.url)
			if !strings.Contains(out, "cred:1ab") || !strings.Contains(out, "tenant:a%_*?[x]") ||
				(name != "redis" && !strings.Contains(out, "5 scopes in ")) {
				t.Fatalf("keys scopes:\n%s", out)
			}
			for _, args := range [][]string{{"--cursor", "not a cursor!"}, {"--limit", "0"}, {"--limit", "1001"}} {
				_, stderr, code := runCode(t, append([]string{"keys", "scopes", "--store", ks.url}, args...)...)
				if code != 2 || !strings.Contains(stderr, strings.TrimPrefix(args[0], "--")) {
					t.Fatalf("keys scopes %v exited %d: %q", args, code, stderr)
				}
			}
			// keys list without --scope: every record of every scope, paged 4 at a
			// time across scopes (SQL stores: each once, scope after scope).
			records := map[string]int{}
			cursor = ""
			for pages := 0; ; pages++ {
				if pages > 1000 {
					t.Fatalf("keys list did not end after %d pages", pages)
				}
				var page struct {
					Store   string      `json:"store"`
					Scope   string      `json:"scope"`
					Records []keyRecord `json:"records"`
					Next    string      `json:"next"`
				}
				decode(t, mustRun(t, "keys", "list", "--store", ks.url, "--limit", "4", "--cursor", cursor, "--json"), &page)
				if len(page.Records) > 4 {
					t.Fatalf("a page of %d records, limit 4", len(page.Records))
				}
				for _, r := range page.Records {
					records[r.Scope+"/"+r.ID]++
				}
				if cursor = page.Next; cursor == "" {
					break
				}
			}
			for _, sc := range want {
				for i := range 3 {
					k := fmt.Sprintf("%s/k%d", sc, i)
					if records[k] == 0 || (name != "redis" && records[k] != 1) {
						t.Fatalf("record %s listed %d times (all: %v)", k, records[k], records)
					}
				}
			}
			if name != "redis" && len(records) != 3*len(want) {
				t.Fatalf("%d records listed, want %d: %v", len(records), 3*len(want), records)
			}
			// Redis walks its keys in SCAN's order, which the random key prefix of
			// each run changes: its first page holds some scope, not a given one.
			if out := mustRun(t, "keys", "list", "--store", ks.url); !strings.Contains(out, "SCOPE") ||
				(!strings.Contains(out, " k0 ") && !strings.Contains(out, " k1 ") && !strings.Contains(out, " k2 ")) ||
				!strings.Contains(out, "records of every scope") ||
				(name != "redis" && (!strings.Contains(out, "cred:1ab") || !strings.Contains(out, "15 records of every scope"))) {
				t.Fatalf("keys list without --scope:\n%s", out)
			}
			if _, stderr, code := runCode(t, "keys", "scopes", "--store", ks.url); code != 0 || stderr != "" {
				t.Fatalf("keys scopes exited %d with stderr %q, want 0 and nothing", code, stderr)
			}
			_, stderr, code := runCode(t, "keys", "list", "--store", ks.url, "--cursor", "not a cursor!")
			if strings.Contains(stderr, "--scope is required") {
				t.Fatalf("keys list without --scope printed %q", stderr)
			}
			if code != 2 || !strings.Contains(stderr, "cursor") {
				t.Fatalf("keys list with a garbage cursor exited %d: %q", code, stderr)
			}
			_, stderr, code = runCode(t, "keys", "get", "--store", ks.url, "--id", "k0")
			if code != 2 || !strings.Contains(stderr, "idem keys scopes --store URL") {
				t.Fatalf("keys get without --scope exited %d: %q", code, stderr)
			}
		})
	}
}
