// Package rowscan reads rows that may not hold what their columns promise, for the
// operator views (dead letters, parked messages, sagas): a row written by another
// service, or by hand, must show with what is wrong with it, never fail the page
// of rows around it.
package rowscan

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/idemhq/idem/idemsql"
)

// MaxProblemLen bounds the text of one problem: a driver's conversion error quotes
// the value, which may be long.
const MaxProblemLen = 256

// Scan scans the current row of r into dest, as r.Scan does. When a value does not
// fit its destination (SQLite keeps any value in any column: text where a number
// belongs), Scan reads the row again one column at a time: the values that fit are
// set, the destinations of the others are set to their zero value, and bad names
// those columns (cols names dest, in order) and why. Each of dest is a pointer. err is the first Scan's error when
// the row cannot be read again, as with a driver that ends the result set at a
// failed Scan (pgx: PostgreSQL and MySQL type their columns, so their values fit),
// or with an *sql.Row, which reads once: pass the *sql.Rows of a Query.
func Scan(r idemsql.Row, cols []string, dest ...any) (bad string, err error) {
	first := r.Scan(dest...)
	if first == nil {
		return "", nil
	}
	var sink any
	args := make([]any, len(dest))
	fill := func() {
		for i := range args {
			args[i] = &sink
		}
	}
	fill()
	if r.Scan(args...) != nil {
		return "", first // not a value that does not fit: the row is gone
	}
	var problems []string
	for i := range dest {
		// Into a fresh value: a failed conversion may have set part of the
		// destination (database/sql allocates a pointer's target first).
		d := reflect.ValueOf(dest[i]).Elem()
		v := reflect.New(d.Type())
		fill()
		args[i] = v.Interface()
		if err := r.Scan(args...); err != nil {
			if inner := errors.Unwrap(err); inner != nil {
				err = inner // without database/sql's "Scan error on column index" prefix
			}
			problems = append(problems, name(cols, i)+": "+err.Error())
			d.SetZero()
			continue
		}
		d.Set(v.Elem())
	}
	if len(problems) == 0 {
		return "", first
	}
	return Join(problems...), nil
}

func name(cols []string, i int) string {
	if i < len(cols) {
		return cols[i]
	}
	return fmt.Sprintf("column %d", i+1)
}

// JSON decodes text, the value of column col, into v; what says what the column
// should hold ("a JSON object of strings"). It returns "" when text decodes, else
// the problem, naming col. v then holds what could be decoded.
func JSON(col, text string, v any, what string) string {
	if err := json.Unmarshal([]byte(text), v); err != nil {
		return col + ": not " + what + " (" + err.Error() + ")"
	}
	return ""
}

// Join joins the non-empty problems, each cut to MaxProblemLen bytes, with "; ".
func Join(problems ...string) string {
	var out []string
	for _, p := range problems {
		if p == "" {
			continue
		}
		if len(p) > MaxProblemLen {
			p = strings.ToValidUTF8(p[:MaxProblemLen], "") + "…"
		}
		out = append(out, p)
	}
	return strings.Join(out, "; ")
}
