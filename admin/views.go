package admin

// viewsOf maps a page's rows to their views with of: never nil, so that an empty
// page is written [] in JSON, not null.
func viewsOf[T, V any](rows []T, of func(T) V) []V {
	out := make([]V, 0, len(rows))
	for _, r := range rows {
		out = append(out, of(r))
	}
	return out
}

// idPage is viewsOf for a page of rows listed after an id (a dead letter, a parked
// message), with the cursor of the next page: a full page may have more after it,
// so it gets one (the next page may be empty); a shorter one is the last.
func idPage[T, V any](rows []T, limit int, id func(T) int64, of func(T) V) (views []V, next string) {
	if len(rows) == limit {
		next = encodeIDCursor(id(rows[len(rows)-1]))
	}
	return viewsOf(rows, of), next
}
