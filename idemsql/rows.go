package idemsql

import "context"

// EachRow runs query on q and calls each for every row it returns, then closes
// the rows and returns their error: the loop of every statement that returns
// more than one row, in the components, the drivers and drivertest.
func EachRow(ctx context.Context, q Querier, query string, args []any, each func(Rows) error) error {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Collect runs query on q and returns what scan makes of each row, in order.
func Collect[T any](ctx context.Context, q Querier, query string, args []any, scan func(Rows) (T, error)) ([]T, error) {
	var out []T
	err := EachRow(ctx, q, query, args, func(r Rows) error {
		v, err := scan(r)
		out = append(out, v)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
