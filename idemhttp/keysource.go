package idemhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// jsonKey returns the value of field, a top-level field of the JSON object body: a
// string, or the literal of a number. found is false for an object without it, or
// an empty body. The
// error says, for a sentence after "and", what is wrong: the body is not one JSON
// object, the value has another type, or the field is there twice (in any letter
// case, since JSON decoders differ on which one wins and Go's matches any case).
func jsonKey(body []byte, field string) (key string, found bool, err error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return "", false, nil // no body, no key
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false, errors.New("the body is not a JSON object: send one, with the key in its field")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", false, errors.New("the body is not valid JSON")
		}
		name, _ := tok.(string) // a key inside an object is a string
		if !strings.EqualFold(name, field) {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return "", false, errors.New("the body is not valid JSON")
			}
			continue
		}
		switch {
		case found:
			return "", false, fmt.Errorf("the body holds the field %q twice (or in another letter case): send it once", field)
		case name != field:
			return "", false, fmt.Errorf("the body names it %q: send %q, exactly", name, field)
		}
		found = true
		tok, err = dec.Token()
		switch v := tok.(type) {
		case string:
			key = v
		case json.Number:
			key = v.String()
		default:
			if err != nil {
				return "", false, errors.New("the body is not valid JSON")
			}
			return "", false, fmt.Errorf("the field %q is not a string or a number: send the key as a string", field)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return "", false, errors.New("the body is not valid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", false, errors.New("the body holds more than one JSON value: send one object")
	}
	return key, found, nil
}
