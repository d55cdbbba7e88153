package operator

import (
	"context"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin/view"
)

// keysScopes prints a page of the scopes --store holds records in: the way in when
// no caller's scope is known (behind serve, scopes are hashes of credentials).
func (m *Cmd) keysScopes(ctx context.Context, o keysOptions) error {
	const cmd = "keys scopes"
	if err := m.checkLimit(cmd, o.limit, idem.MaxListLimit, "--cursor"); err != nil {
		return err
	}
	in, desc, closeStore, err := m.openStoreInspector(ctx, cmd, o, false)
	if err != nil {
		return err
	}
	defer closeStore()
	sl, ok := in.(idem.ScopeLister)
	if !ok {
		return fmt.Errorf("--store %s: this store cannot list its scopes; list a known scope's keys with 'idem keys list --scope S'", desc)
	}
	page, err := sl.Scopes(ctx, o.cursor, o.limit)
	if err != nil {
		return badInput(err)
	}
	out := struct {
		Store  string   `json:"store"`
		Scopes []string `json:"scopes"`
		Next   string   `json:"next"`
	}{desc, page.Scopes, page.Next}
	if out.Scopes == nil {
		out.Scopes = []string{}
	}
	if o.json {
		return writeJSON(m.Stdout, out)
	}
	tw := newTable(m.Stdout)
	fmt.Fprintln(tw, "SCOPE")
	for _, sc := range out.Scopes {
		fmt.Fprintln(tw, view.Cell(sc, 0))
	}
	return m.endTable(tw, fmt.Sprintf("%d scopes in %s; 'idem keys list --scope S' lists one's keys", len(out.Scopes), desc), moreCursor(page.Next))
}
