package admin_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/idemhq/idem/admin"
)

// served lists the routes the API must have, written out by hand so that the
// document and the handler are each checked against something they do not
// produce themselves.
var served = []string{
	"GET /api/", "GET /api/openapi.json",
	"GET /api/stores", "GET /api/scopes", "GET /api/keys", "GET /api/key", "POST /api/keys/evict",
	"GET /api/deadletters", "GET /api/deadletters/{id}", "POST /api/deadletters/replay", "POST /api/deadletters/{id}/discard",
	"GET /api/outbox", "GET /api/outbox/parked", "POST /api/outbox/parked/{id}/retry", "POST /api/outbox/parked/{id}/discard",
	"GET /api/effects", "GET /api/sagas", "GET /api/sagas/{id}", "POST /api/sagas/{id}/retry", "POST /api/sagas/{id}/resolve",
	"GET /api/stream", "GET /api/metrics",
	"POST /api/effects/purge", "POST /api/sagas/purge",
	"GET /api/audit", "POST /api/audit/repair", "GET /api/audit/repairs",
	"GET /api/queue", "GET /api/queue/messages", "POST /api/queue/cancel",
}

type openAPIDoc struct {
	OpenAPI string `json:"openapi"`
	Paths   map[string]map[string]struct {
		OperationID string `json:"operationId"`
		Parameters  []struct {
			Name, In string
			Required bool
			Schema   struct{ Description string } `json:"schema"`
		} `json:"parameters"`
		RequestBody *struct{} `json:"requestBody"`
	} `json:"paths"`
}

func TestOpenAPIMatchesHandler(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var doc openAPIDoc
	wantJSON(t, b.do(t, "GET", "/api/openapi.json", readToken, ""), &doc)
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	var documented []string
	ops := map[string]bool{}
	for path, methods := range doc.Paths {
		for m, op := range methods {
			documented = append(documented, strings.ToUpper(m)+" "+path)
			if op.OperationID == "" || ops[op.OperationID] {
				t.Errorf("%s %s: operationId %q empty or repeated", m, path, op.OperationID)
			}
			ops[op.OperationID] = true
			if (m == "post") != (op.RequestBody != nil) {
				t.Errorf("%s %s: request body documented %v", m, path, op.RequestBody != nil)
			}
			for _, p := range op.Parameters {
				if p.In == "path" && !strings.Contains(path, "{"+p.Name+"}") {
					t.Errorf("%s %s: path parameter %s not in the path", m, path, p.Name)
				}
			}
		}
	}
	// The saga states the API accepts are the ones it documents, resolved included.
	var stateDoc string
	for _, p := range doc.Paths["/api/sagas"]["get"].Parameters {
		if p.Name == "state" {
			stateDoc = p.Schema.Description
		}
	}
	for _, st := range []string{"running", "compensating", "completed", "compensated", "failed", "resolved"} {
		if !strings.Contains(stateDoc, st) {
			t.Errorf("GET /api/sagas state documented as %q, lacks %s", stateDoc, st)
		}
		if w := b.do(t, "GET", "/api/sagas?state="+st, readToken, ""); w.Code != http.StatusOK {
			t.Errorf("GET /api/sagas?state=%s: %d %s", st, w.Code, w.Body)
		}
	}
	slices.Sort(documented)
	want := slices.Sorted(slices.Values(served))
	if !slices.Equal(documented, want) {
		t.Errorf("documented routes\n%v\nwant\n%v", documented, want)
	}

	// Every route, documented or expected, is served: the handler answers it
	// itself, not the no-route fallback, and no 405.
	for _, rt := range append(documented, served...) {
		method, path, _ := strings.Cut(rt, " ")
		body := ""
		if method == "POST" {
			body = "{}"
		}
		w := b.do(t, method, strings.ReplaceAll(path, "{id}", "1"), fullToken, body)
		if w.Code == http.StatusMethodNotAllowed {
			t.Errorf("%s: 405", rt)
			continue
		}
		var p problemBody
		_ = json.Unmarshal(w.Body.Bytes(), &p)
		if p.Type == admin.ProblemNoRoute || p.Type == admin.ProblemNotConfigured {
			t.Errorf("%s: not served: %s", rt, w.Body)
		}
	}
	// And what is not documented is not served.
	for _, rt := range []string{"GET /api/keys/evict", "POST /api/keys", "DELETE /api/sagas/1", "GET /api/deadletters/1/discard", "PUT /api/"} {
		method, path, _ := strings.Cut(rt, " ")
		wantProblem(t, b.do(t, method, path, fullToken, ""), 404, admin.ProblemNoRoute)
	}
}

// The keys' answers are documented by schemas made from their Go types: a client
// finds the decoded stored response (http) beside the raw preview (result).
func TestOpenAPIKeySchemas(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Content map[string]struct {
					Schema map[string]any `json:"schema"`
				} `json:"content"`
			} `json:"responses"`
		} `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Properties map[string]map[string]any `json:"properties"`
				Required   []string                  `json:"required"`
			} `json:"schemas"`
		} `json:"components"`
	}
	wantJSON(t, b.do(t, "GET", "/api/openapi.json", readToken, ""), &doc)
	if ref := doc.Paths["/api/key"]["get"].Responses["200"].Content["application/json"].Schema["$ref"]; ref != "#/components/schemas/KeyRecord" {
		t.Errorf("GET /api/key answers %v", ref)
	}
	if ref := doc.Paths["/api/metrics"]["get"].Responses["200"].Content["application/json"].Schema["$ref"]; ref != "#/components/schemas/MetricsSummary" {
		t.Errorf("GET /api/metrics answers %v", ref)
	}
	key := doc.Components.Schemas["KeyRecord"]
	if key.Properties["http"]["$ref"] != "#/components/schemas/StoredHTTP" || key.Properties["result"]["$ref"] != "#/components/schemas/Preview" ||
		slices.Contains(key.Required, "http") || !slices.Contains(key.Required, "result") {
		t.Errorf("KeyRecord schema %+v", key)
	}
	st := doc.Components.Schemas["StoredHTTP"]
	for _, f := range []string{"status", "content_type", "headers", "header_count", "headers_truncated", "body"} {
		if st.Properties[f] == nil || !slices.Contains(st.Required, f) {
			t.Errorf("StoredHTTP lacks %s: %+v", f, st)
		}
	}
	body := doc.Components.Schemas["BodyPreview"]
	if body.Properties["size"]["type"] != "integer" || body.Properties["encoding"]["type"] != "string" || body.Properties["truncated"]["type"] != "boolean" {
		t.Errorf("BodyPreview schema %+v", body)
	}
}
