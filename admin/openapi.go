package admin

import (
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"time"
)

var pathParam = regexp.MustCompile(`\{([a-z]+)\}`)

// openAPI builds the OpenAPI 3.1 document of the route table.
func openAPI() []byte {
	problem := map[string]any{"description": "an RFC 9457 problem",
		"content": map[string]any{ContentTypeProblem: map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Problem"}}}}
	paths := map[string]map[string]any{}
	schemas := map[string]any{"Problem": map[string]any{"type": "object", "properties": map[string]any{
		"type": map[string]any{"type": "string"}, "title": map[string]any{"type": "string"},
		"status": map[string]any{"type": "integer"}, "detail": map[string]any{"type": "string"}}}}
	for _, rt := range routes {
		ok := map[string]any{}
		if rt.resp != nil {
			ok = map[string]any{"schema": typeSchema(reflect.TypeOf(rt.resp), schemas)}
		}
		op := map[string]any{
			"operationId": strings.ReplaceAll(rt.summary, " ", "_"),
			"summary":     rt.summary,
			"tags":        []string{rt.area},
			"responses": map[string]any{
				"200":     map[string]any{"description": "OK", "content": map[string]any{"application/json": ok}},
				"default": problem,
			},
		}
		var params []map[string]any
		for _, m := range pathParam.FindAllStringSubmatch(rt.path, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		for _, p := range rt.query {
			params = append(params, map[string]any{"name": p.name, "in": "query", "required": p.required,
				"description": p.doc, "schema": schema(p)})
		}
		if params != nil {
			op["parameters"] = params
		}
		if rt.mutates {
			props, required := map[string]any{}, []string{}
			for _, p := range rt.body {
				props[p.name] = schema(p)
				if p.required {
					required = append(required, p.name)
				}
			}
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{
				"schema": map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}}}}
			op["description"] = "Full-access token only; audited."
		}
		if paths[rt.openAPIPath()] == nil {
			paths[rt.openAPIPath()] = map[string]any{}
		}
		paths[rt.openAPIPath()][strings.ToLower(rt.method)] = op
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "idem admin API", "version": "1",
			"description": "Inspect and act on idem's state: keys, dead letters, outbox, effects, sagas, stream, the end-to-end audit."},
		"paths":    paths,
		"security": []any{map[string]any{"bearer": []string{}}},
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
			"schemas":         schemas,
		},
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic(err) // maps of strings and slices always encode
	}
	return append(b, '\n')
}

func schema(p param) map[string]any {
	s := map[string]any{"type": p.typ}
	if p.typ == "array" {
		s["items"] = map[string]any{"type": "integer", "format": "int64"}
	}
	if p.doc != "" {
		s["description"] = p.doc
	}
	return s
}

func serveOpenAPI(h *handler, r *http.Request, c *call) (any, error) {
	return rawJSON(h.openapi), nil
}

// typeSchema returns the JSON schema of t as encoding/json writes it: a named
// struct goes to schemas (components/schemas) and is referred to, so the document
// follows the Go types of the answers.
func typeSchema(t reflect.Type, schemas map[string]any) map[string]any {
	switch {
	case t == reflect.TypeFor[time.Time]():
		return map[string]any{"type": "string", "format": "date-time"}
	case t.Kind() == reflect.Pointer:
		return typeSchema(t.Elem(), schemas)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		return map[string]any{"type": "string", "contentEncoding": "base64"}
	case t.Kind() == reflect.Slice:
		return map[string]any{"type": "array", "items": typeSchema(t.Elem(), schemas)}
	case t.Kind() == reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": typeSchema(t.Elem(), schemas)}
	case t.Kind() == reflect.String:
		return map[string]any{"type": "string"}
	case t.Kind() == reflect.Bool:
		return map[string]any{"type": "boolean"}
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return map[string]any{"type": "number"}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return map[string]any{"type": "integer"}
	case t.Kind() != reflect.Struct:
		return map[string]any{}
	}
	ref := map[string]any{"$ref": "#/components/schemas/" + t.Name()}
	if _, ok := schemas[t.Name()]; ok {
		return ref
	}
	schemas[t.Name()] = nil // a recursive type refers to itself
	props, required := map[string]any{}, []string{}
	for f := range t.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = typeSchema(f.Type, schemas)
		if !strings.Contains(opts, "omit") && f.Type.Kind() != reflect.Pointer {
			required = append(required, name)
		}
	}
	schemas[t.Name()] = map[string]any{"type": "object", "properties": props, "required": required}
	return ref
}
