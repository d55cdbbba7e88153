package operator

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin/view"
	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/internal/cursor"
)

const keysSynopsis = `Look at and evict the idempotency records of a store: the keys that
'idem serve --store URL' (or a service's idemhttp middleware, or idem.Do) recorded.

  idem keys scopes --store URL [--cursor C] [--limit N]
  idem keys list  --store URL [--scope S] [--cursor C] [--limit N]
  idem keys get   --store URL --scope S --id ID [--full]
  idem keys evict --store URL --scope S --id ID --reason "…" [--force]
  idem keys scope --headers-file FILE [serve's --scope-header, --trust-scope-header,
                  --credential-headers, --credential-cookies]

URL is what serve was given: sqlite:PATH, postgres://user:pass@host:5432/db,
mysql://user:pass@host:3306/db or redis://host:6379[/db][?prefix=P].

A key is a scope and an id. Behind 'idem serve' the id is the request's
Idempotency-Key and the scope is who sent it: "anonymous" for a request without
credentials; "cred:" and 32 hex digits, a SHA-256 hash of the caller's
Authorization, Proxy-Authorization, Cookie and --credential-headers (a lone
Authorization header gives "auth:" and its hash instead); with --scope-header H,
"tenant:<value of H>/" followed by that; with --trust-scope-header,
"tenant:<value of H>" alone. Credentials are never stored in clear: 'idem keys
scope' prints a caller's scope from a file of its request headers ("Name: value"
lines; - reads stdin), given serve's scope flags, so no credential goes on the
command line. 'idem keys scopes' lists the scopes a store holds records in, and
'idem keys list' without --scope lists the records of every scope, scope after
scope, for when no caller's scope is known: what did the gateway record? (Redis
lists them by SCAN: unordered, a scope may come again on a later page.)

evict deletes a record so the key runs again on its next request. A completed
record goes freely; an in-progress one needs --force, which fences its holder out
(its result is then not stored, and a retry may run the effect a second time).
The result is a preview (64 bytes: text if printable, else hex), as the admin
API shows it; get --full shows all of it, escaped.`

type keysOptions struct {
	store, scope, id, cursor, reason string
	limit                            int
	json, full, force                bool
}

// Keys runs `idem keys <action>`: the records of a store (scopes, list, get, evict, scope).
func (m *Cmd) Keys(ctx context.Context, args []string) error {
	var o keysOptions
	store := func(fs *flag.FlagSet) {
		fs.StringVar(&o.store, "store", "", "the store: sqlite:PATH, postgres://…, mysql://… or redis://… (as given to serve)")
		fs.BoolVar(&o.json, "json", false, "print one JSON document instead of a table")
	}
	key := func(fs *flag.FlagSet, withID bool) {
		store(fs)
		fs.StringVar(&o.scope, "scope", "", `the keys' scope ("anonymous", "cred:<hash>", "tenant:<value>/…"; see above)`)
		if withID {
			fs.StringVar(&o.id, "id", "", "the key's id (behind serve: the Idempotency-Key)")
		}
	}
	page := func(fs *flag.FlagSet, what string) {
		fs.StringVar(&o.cursor, "cursor", "", "the page after this cursor (the last page printed it)")
		fs.IntVar(&o.limit, "limit", 100, fmt.Sprintf("at most this many %s (1 to %d)", what, idem.MaxListLimit))
	}
	run := func(f func(context.Context, keysOptions) error) func(context.Context) error {
		return func(ctx context.Context) error { return f(ctx, o) }
	}
	var so keysScopeOptions
	return m.runOps(ctx, opsCommand{name: "keys", synopsis: keysSynopsis, actions: []opsAction{
		{"scopes", func(fs *flag.FlagSet) { store(fs); page(fs, "scopes") }, run(m.keysScopes)},
		{"list", func(fs *flag.FlagSet) { key(fs, false); page(fs, "records") }, run(m.keysList)},
		{"get", func(fs *flag.FlagSet) {
			key(fs, true)
			fs.BoolVar(&o.full, "full", false, "show the whole stored result (escaped; base64 in --json), not a preview")
		}, run(m.keysGet)},
		{"evict", func(fs *flag.FlagSet) {
			key(fs, true)
			fs.BoolVar(&o.force, "force", false, "also evict an in-progress record, fencing its holder out")
			fs.StringVar(&o.reason, "reason", "", "why (required): printed with what was done, for your change log")
		}, run(m.keysEvict)},
		{"scope", func(fs *flag.FlagSet) {
			fs.StringVar(&so.headersFile, "headers-file", "", "the caller's request headers, one 'Name: value' a line; - for stdin")
			fs.StringVar(&so.scopeHeader, "scope-header", "", "serve's --scope-header")
			fs.BoolVar(&so.trustScope, "trust-scope-header", false, "serve's --trust-scope-header")
			fs.StringVar(&so.credentialHeaders, "credential-headers", "X-Api-Key", "serve's --credential-headers")
			fs.StringVar(&so.credentialCookies, "credential-cookies", "", "serve's --credential-cookies")
		}, func(ctx context.Context) error { return m.keysScope(ctx, so) }},
	}}, args)
}

// openInspector checks --scope and opens --store for `idem keys`.
func (m *Cmd) openInspector(ctx context.Context, cmd string, o keysOptions) (idem.Inspector, string, func(), error) {
	return m.openStoreInspector(ctx, cmd, o, true)
}

// openStoreInspector opens --store for `idem keys`, after checking --scope if
// withScope.
func (m *Cmd) openStoreInspector(ctx context.Context, cmd string, o keysOptions, withScope bool) (idem.Inspector, string, func(), error) {
	if o.store == "" {
		return nil, "", nil, m.usagef(cmd, "--store is required: the store serve uses (sqlite:PATH, postgres://…, mysql://…, redis://…)")
	}
	spec, err := open.ParseStore(o.store)
	if err != nil {
		return nil, "", nil, m.usagef(cmd, "%v", err)
	}
	switch spec.Kind {
	case "memory":
		return nil, "", nil, m.usagef(cmd, "--store memory: lives inside the serve process: this command cannot reach it; use its admin API")
	case "sqlite":
		if _, err := os.Stat(spec.Path); err != nil {
			return nil, "", nil, fmt.Errorf("--store %s: %w: name the file serve uses", spec.Desc, errors.Unwrap(err))
		}
	}
	if withScope && o.scope == "" {
		return nil, "", nil, m.usagef(cmd, "--scope is required: 'idem keys scopes --store URL' lists the scopes the store holds")
	}
	if withScope {
		if err := checkKeyPart(m, cmd, "scope", o.scope); err != nil {
			return nil, "", nil, err
		}
	}
	store, closeStore, err := open.ExistingStore(ctx, spec)
	if err != nil {
		return nil, "", nil, err
	}
	in, ok := store.(idem.Inspector)
	if !ok {
		closeStore()
		return nil, "", nil, fmt.Errorf("--store %s: this store cannot be inspected", spec.Desc)
	}
	return in, spec.Desc, closeStore, nil
}

func checkKeyPart(m *Cmd, cmd, name, v string) error {
	if v == "" {
		return m.usagef(cmd, "--%s is required", name)
	}
	// Key.Validate names the field; check the part alone.
	k := idem.Key{Scope: "s", ID: "i"}
	if name == "scope" {
		k.Scope = v
	} else {
		k.ID = v
	}
	if err := k.Validate(); err != nil {
		return m.usagef(cmd, "--%s: %v", name, err)
	}
	return nil
}

func (m *Cmd) keysList(ctx context.Context, o keysOptions) error {
	if err := m.checkLimit("keys list", o.limit, idem.MaxListLimit, "--cursor"); err != nil {
		return err
	}
	in, desc, closeStore, err := m.openStoreInspector(ctx, "keys list", o, o.scope != "")
	if err != nil {
		return err
	}
	defer closeStore()
	var page idem.KeyPage
	if o.scope == "" {
		page, err = listEveryScope(ctx, in, o.cursor, o.limit)
	} else {
		page, err = in.List(ctx, o.scope, o.cursor, o.limit)
	}
	if err != nil {
		return badInput(err)
	}
	now := time.Now()
	out := struct {
		Store   string           `json:"store"`
		Scope   string           `json:"scope"`
		Records []view.KeyRecord `json:"records"`
		Next    string           `json:"next"`
	}{desc, o.scope, make([]view.KeyRecord, 0, len(page.Records)), page.Next}
	for _, rec := range page.Records {
		out.Records = append(out.Records, view.KeyRecordOf(desc, rec, now, false))
	}
	if o.json {
		return writeJSON(m.Stdout, out)
	}
	tw := newTable(m.Stdout)
	if o.scope == "" {
		fmt.Fprintln(tw, "SCOPE\tID\tSTATE\tCREATED\tEXPIRES\tTOKEN\tRESULT")
	} else {
		fmt.Fprintln(tw, "ID\tSTATE\tCREATED\tEXPIRES\tTOKEN\tRESULT")
	}
	for _, r := range out.Records {
		if o.scope == "" {
			fmt.Fprintf(tw, "%s\t", view.Cell(r.Scope, 48))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", view.Cell(r.ID, 80), r.StateText(), view.When(r.CreatedAt), view.When(r.ExpiresAt), r.Token, r.ResultText())
	}
	summary := fmt.Sprintf("%d records of every scope in %s", len(out.Records), desc)
	if o.scope != "" {
		summary = fmt.Sprintf("%d records of scope %s in %s", len(out.Records), view.Cell(o.scope, 80), desc)
	}
	return m.endTable(tw, summary, moreCursor(page.Next))
}

func (m *Cmd) keysGet(ctx context.Context, o keysOptions) error {
	if err := checkKeyPart(m, "keys get", "id", o.id); err != nil {
		return err
	}
	in, desc, closeStore, err := m.openInspector(ctx, "keys get", o)
	if err != nil {
		return err
	}
	defer closeStore()
	k := idem.Key{Scope: o.scope, ID: o.id}
	rec, err := in.Inspect(ctx, k)
	if errors.Is(err, idem.ErrNotFound) {
		return notFoundf("no record for key scope=%s id=%s in %s", strconv.Quote(k.Scope), strconv.Quote(k.ID), desc)
	} else if err != nil {
		return badInput(err)
	}
	rec.Key = k
	r := view.KeyRecordOf(desc, rec, time.Now(), o.full)
	if o.json {
		return writeJSON(m.Stdout, r)
	}
	m.printKey(r)
	if o.full {
		fmt.Fprintf(m.Stdout, "full result:\n%s\n", view.FullText(rec.Result))
	}
	return nil
}

func (m *Cmd) printKey(r view.KeyRecord) {
	tw := newTable(m.Stdout)
	for _, row := range [][2]string{
		{"scope", view.Cell(r.Scope, 0)}, {"id", view.Cell(r.ID, 0)}, {"state", r.StateText()},
		{"created", view.When(r.CreatedAt)}, {"expires", view.When(r.ExpiresAt)}, {"token", r.Token},
		{"fingerprint", view.Cell(r.Fingerprint, 0)}, {"result", r.Result.Text()},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	if h := r.HTTP; h != nil {
		status := strconv.Itoa(h.Status)
		if h.NotStored {
			status += " (sent once, too large to store: a retry is answered 409)"
		}
		fmt.Fprintf(tw, "http status\t%s\n", status)
		for _, f := range h.Headers {
			v := view.Escape(f.Value, 0)
			if f.Truncated {
				v += "…"
			}
			fmt.Fprintf(tw, "http header\t%s: %s\n", view.Escape(f.Name, 0), v)
		}
		if h.HeadersTruncated {
			fmt.Fprintf(tw, "http header\t… %d more (--json lists %d of %d)\n", h.HeaderCount-len(h.Headers), len(h.Headers), h.HeaderCount)
		}
		if h.NotStored {
			fmt.Fprintf(tw, "http body\t(not stored: %d bytes)\n", h.Body.Size)
		} else {
			fmt.Fprintf(tw, "http body\t%s\n", h.Body.Text())
		}
	}
	tw.Flush()
}

func (m *Cmd) keysEvict(ctx context.Context, o keysOptions) error {
	if err := checkKeyPart(m, "keys evict", "id", o.id); err != nil {
		return err
	}
	if err := m.checkNote("keys evict", "reason", o.reason); err != nil {
		return err
	}
	in, desc, closeStore, err := m.openInspector(ctx, "keys evict", o)
	if err != nil {
		return err
	}
	defer closeStore()
	k := idem.Key{Scope: o.scope, ID: o.id}
	rec, err := in.Evict(ctx, k, o.force)
	var ie *idem.InputError
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return notFoundf("no record for key scope=%s id=%s in %s: nothing evicted", strconv.Quote(k.Scope), strconv.Quote(k.ID), desc)
	case errors.As(err, &ie) && ie.Field == "force":
		return conflictf("key scope=%s id=%s is in progress: its holder may still be running the effect; nothing evicted. "+
			"Wait for it to finish, or pass --force to evict it and fence the holder out (a retry may then run the effect again)",
			strconv.Quote(k.Scope), strconv.Quote(k.ID))
	case err != nil:
		return badInput(err)
	}
	rec.Key = k
	r := view.KeyRecordOf(desc, rec, time.Now(), false)
	if o.json {
		return writeJSON(m.Stdout, struct {
			Evicted view.KeyRecord `json:"evicted"`
			Forced  bool           `json:"forced"`
			Reason  string         `json:"reason"`
		}{r, o.force, o.reason})
	}
	fmt.Fprintf(m.Stdout, "evicted key scope=%s id=%s from %s (it was %s); reason: %s\n",
		view.Cell(k.Scope, 0), view.Cell(k.ID, 0), desc, r.State, view.Cell(o.reason, 0))
	if rec.State == idem.StateInProgress {
		fmt.Fprintln(m.Stdout, "its holder is fenced out: its Complete gets ErrLeaseLost, and the next request with this key runs again")
	} else {
		fmt.Fprintln(m.Stdout, "the next request with this key runs again")
	}
	return nil
}

// listEveryScope lists up to limit records of every scope of in, scope after scope
// (idem.ScopeLister), from cursor: the scopes' cursor after the current scope, the
// current scope, and the key cursor within it, "" for the first page. Each scope
// visited gives at least one record, so a page visits at most limit scopes.
func listEveryScope(ctx context.Context, in idem.Inspector, cur string, limit int) (idem.KeyPage, error) {
	sl, ok := in.(idem.ScopeLister)
	if !ok {
		return idem.KeyPage{}, &idem.InputError{Field: "scope", Reason: "is empty, and this store cannot list its scopes",
			Fix: "name the scope with --scope"}
	}
	parts, err := cursor.Decode(cur, 3)
	if err != nil {
		return idem.KeyPage{}, err
	}
	var scopes, scope, inner string
	if parts != nil {
		scopes, scope, inner = parts[0], parts[1], parts[2]
	}
	var page idem.KeyPage
	for len(page.Records) < limit {
		if scope == "" {
			if parts != nil && scopes == "" {
				return page, nil // the last scope is done
			}
			sp, err := sl.Scopes(ctx, scopes, 1)
			if err != nil {
				return idem.KeyPage{}, err
			}
			parts = []string{} // past the first page of scopes
			scopes = sp.Next
			if len(sp.Scopes) == 0 {
				continue // a short Redis page; sp.Next "" ends the listing above
			}
			scope, inner = sp.Scopes[0], ""
		}
		kp, err := in.List(ctx, scope, inner, limit-len(page.Records))
		if err != nil {
			return idem.KeyPage{}, err
		}
		page.Records = append(page.Records, kp.Records...)
		if kp.Next != "" {
			inner = kp.Next
			break // the page is full within this scope
		}
		scope, inner = "", ""
		if scopes == "" {
			return page, nil
		}
	}
	if scope != "" || scopes != "" {
		page.Next = cursor.Encode(scopes, scope, inner)
	}
	return page, nil
}
