package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/idemhq/idem/admin/view"
)

// maxBodyDepth bounds how deep a request body nests: every body is a flat object.
const maxBodyDepth = 8

// decode reads the JSON object body of a mutation into dst, a pointer to the
// request's struct. Every mutation reads its body here, and it refuses what
// encoding/json would let through: a field given twice (the last would win, where
// a proxy or a log may have read the first), a name that is not exactly one of the
// request's fields (encoding/json matches "FORCE" to force, and ignores unknown
// names), and data after the object. The problem names the field and the fix.
func decode(r *http.Request, dst any) error {
	body, err := io.ReadAll(r.Body) // at most MaxBodyBytes: wrap bounds it
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return invalid("body", "could not be read (%s): send it again", view.Clean(err.Error(), 80))
	}
	if err := checkBody(body, fieldNames(dst)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return invalid("body", "is not the expected JSON object (%s)", view.Clean(err.Error(), 160))
	}
	return nil
}

// checkBody checks that body is one JSON object whose names are fields, each given
// once, and whose nested objects give no name twice either.
func checkBody(body []byte, fields []string) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	switch {
	case errors.Is(err, io.EOF):
		return invalid("body", "is empty: send a JSON object")
	case err != nil:
		return notJSON(err)
	case tok != json.Delim('{'):
		return invalid("body", "is not a JSON object: send {\"field\": value, …}")
	}
	if err := checkObject(dec, fields, 1); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalid("body", "has data after the JSON object: send one object")
	}
	return nil
}

// checkObject reads the members of an object whose '{' dec has read, up to its
// '}'. fields, if not nil, are the names allowed.
func checkObject(dec *json.Decoder, fields []string, depth int) error {
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return notJSON(err)
		}
		name, _ := tok.(string)
		field := "body field " + strconv.Quote(view.Clean(name, 64))
		switch {
		case seen[name]:
			return invalid(field, "is given twice: give each field once")
		case fields != nil && !slices.Contains(fields, name):
			if i := slices.IndexFunc(fields, func(f string) bool { return strings.EqualFold(f, name) }); i >= 0 {
				return invalid(field, "is not a field of this request: names are case-sensitive, use %q", fields[i])
			}
			return invalid(field, "is not a field of this request: use %s", strings.Join(fields, ", "))
		}
		seen[name] = true
		if err := checkValue(dec, depth); err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	if err != nil {
		return notJSON(err)
	}
	return nil
}

// checkValue reads one value, checking the objects in it.
func checkValue(dec *json.Decoder, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return notJSON(err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar
	}
	if depth >= maxBodyDepth {
		return invalid("body", "nests deeper than %d levels: send the request's flat object", maxBodyDepth)
	}
	if d == '{' {
		return checkObject(dec, nil, depth+1)
	}
	for dec.More() { // an array
		if err := checkValue(dec, depth+1); err != nil {
			return err
		}
	}
	_, err = dec.Token() // ']'
	if err != nil {
		return notJSON(err)
	}
	return nil
}

func notJSON(err error) error {
	return invalid("body", "is not valid JSON (%s)", view.Clean(err.Error(), 160))
}

// fieldNames returns the JSON names of the fields of the struct dst points to.
func fieldNames(dst any) []string {
	t := reflect.TypeOf(dst).Elem()
	names := make([]string, 0, t.NumField())
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "-" && f.IsExported() {
			if name == "" {
				name = f.Name
			}
			names = append(names, name)
		}
	}
	return names
}
