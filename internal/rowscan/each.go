package rowscan

import (
	"context"

	"github.com/idemhq/idem/idemsql"
)

// Strings runs query, which selects one text column, on q and returns its values.
func Strings(ctx context.Context, q idemsql.Querier, query string, args ...any) ([]string, error) {
	var out []string
	err := idemsql.EachRow(ctx, q, query, args, func(r idemsql.Rows) error {
		var s string
		if err := r.Scan(&s); err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	return out, err
}
