package rowscan

import (
	"context"

	"github.com/idemhq/idem/idemsql"
)

// Each runs query on q and calls scan for each row it returns, then returns the
// rows' error.
func Each(ctx context.Context, q idemsql.Querier, query string, args []any, scan func(idemsql.Rows) error) error {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Strings runs query, which selects one text column, on q and returns its values.
func Strings(ctx context.Context, q idemsql.Querier, query string, args ...any) ([]string, error) {
	var out []string
	err := Each(ctx, q, query, args, func(r idemsql.Rows) error {
		var s string
		if err := r.Scan(&s); err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	return out, err
}
