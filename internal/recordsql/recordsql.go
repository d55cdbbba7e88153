// Package recordsql holds what idem's drivers (idempg, idemsqlite, idemmysql)
// share in the text of their records family (idemsql.RecordsSQL), whose
// statements are otherwise each driver's own: the table's columns differ.
package recordsql

import (
	"strconv"
	"strings"
)

// IDs returns the placeholders of RecordsSQL.Applied's n ids, "$2, $3, …",
// each followed by cast ("::text" on PostgreSQL, "" elsewhere).
func IDs(n int, cast string) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(i+2) + cast)
	}
	return b.String()
}
