package admin

import (
	"net/http"
	"strings"

	"github.com/idemhq/idem/admin/view"
)

// Areas, as listed by GET /api/ and named in ProblemNotConfigured.
const (
	areaAPI         = "api" // the index and the OpenAPI document: always there
	areaKeys        = "keys"
	areaDeadLetters = "deadletters"
	areaOutbox      = "outbox"
	areaEffects     = "effects"
	areaSagas       = "sagas"
	areaStream      = "stream"
	areaMetrics     = "metrics"
	areaAudit       = "audit"
	areaQueue       = "queue"
)

// route is one endpoint: the table both registers the handlers and feeds the
// OpenAPI document, so neither can list a route the other lacks.
type route struct {
	method  string
	path    string // a ServeMux path: "/api/sagas/{id}"
	area    string
	mutates bool
	summary string  // what the call does, also the subject of its error details
	query   []param // documented query parameters
	body    []param // documented request body fields (mutations)
	resp    any     // if set, a value of the 200 answer's type, documented as a schema
	serve   func(h *handler, r *http.Request, c *call) (any, error)
}

// param documents a query parameter or body field.
type param struct {
	name     string
	typ      string // JSON schema type: string, integer, boolean, array (of integers)
	required bool
	doc      string
}

func (rt route) pattern() string { return rt.method + " " + rt.path }

// label is the route's metric label and log name.
func (rt route) label() string {
	if rt.method == "" {
		return "other"
	}
	return rt.pattern()
}

// openAPIPath is the path as OpenAPI writes it: without ServeMux's {$} anchor.
func (rt route) openAPIPath() string { return strings.TrimSuffix(rt.path, "{$}") }

var noRoute = route{area: areaAPI, summary: "route", serve: func(h *handler, r *http.Request, c *call) (any, error) {
	return nil, newProblem(http.StatusNotFound, ProblemNoRoute,
		"no route "+view.Clean(r.Method, 16)+" "+view.Clean(r.URL.Path, 256)+"; GET /api/openapi.json lists the routes")
}}

var (
	pLimit  = param{name: "limit", typ: "integer", doc: "page size, 1 to 1000 (default 100)"}
	pCursor = param{name: "cursor", typ: "string", doc: "the next cursor of the previous page; empty for the first"}
	pFull   = param{name: "full", typ: "boolean", doc: "1 to include the whole stored bytes (full-access token only)"}
	pReason = param{name: "reason", typ: "string", required: true, doc: "why, for the audit log (1 to 1024 bytes)"}
)

var routes = []route{
	{method: "GET", path: "/api/{$}", area: areaAPI, summary: "index", serve: serveIndex},
	{method: "GET", path: "/api/openapi.json", area: areaAPI, summary: "OpenAPI document", serve: serveOpenAPI},

	{method: "GET", path: "/api/stores", area: areaKeys, summary: "list stores", serve: serveStores},
	{method: "GET", path: "/api/scopes", area: areaKeys, summary: "list scopes",
		query: []param{{name: "store", typ: "string", doc: "store name (optional with one store)"},
			{name: "cursor", typ: "string", doc: "the next cursor of the previous page; empty for the first (Redis: pages are unordered and may repeat a scope)"},
			pLimit},
		serve: serveScopes},
	{method: "GET", path: "/api/keys", area: areaKeys, summary: "list keys",
		query: []param{{name: "store", typ: "string", doc: "store name (optional with one store)"},
			{name: "scope", typ: "string", required: true, doc: "key scope"}, pCursor, pLimit},
		resp: KeyPage{}, serve: serveKeys},
	{method: "GET", path: "/api/key", area: areaKeys, summary: "inspect key",
		query: []param{{name: "store", typ: "string", doc: "store name (optional with one store)"},
			{name: "scope", typ: "string", required: true, doc: "key scope"},
			{name: "id", typ: "string", required: true, doc: "key id"}, pFull},
		resp: KeyRecord{}, serve: serveKey},
	{method: "POST", path: "/api/keys/evict", area: areaKeys, mutates: true, summary: "evict key",
		body: []param{{name: "store", typ: "string", doc: "store name (optional with one store)"},
			{name: "scope", typ: "string", required: true, doc: "key scope"},
			{name: "id", typ: "string", required: true, doc: "key id"},
			{name: "force", typ: "boolean", doc: "evict an in-progress key, fencing its holder out"}, pReason},
		resp: KeyRecord{}, serve: serveEvict},

	{method: "GET", path: "/api/deadletters", area: areaDeadLetters, summary: "list dead letters",
		query: []param{{name: "consumer", typ: "string"}, {name: "kind", typ: "string"},
			{name: "reason", typ: "string", doc: "substring of the reason"},
			{name: "since", typ: "string", doc: "RFC 3339 time"}, {name: "until", typ: "string", doc: "RFC 3339 time"},
			pCursor, pLimit},
		serve: serveDeadLetters},
	{method: "GET", path: "/api/deadletters/{id}", area: areaDeadLetters, summary: "get dead letter",
		query: []param{pFull}, serve: serveDeadLetter},
	{method: "POST", path: "/api/deadletters/replay", area: areaDeadLetters, mutates: true, summary: "replay dead letters",
		body: []param{{name: "ids", typ: "array", required: true,
			doc: "dead letter ids, 1 to 1000; each outcome is replayed, requested (its consumer replays it at its next poll), already_applied, already_done, not_found or error"}, pReason},
		serve: serveReplay},
	{method: "POST", path: "/api/deadletters/{id}/discard", area: areaDeadLetters, mutates: true, summary: "discard dead letter",
		body: []param{pReason}, serve: serveDiscardDeadLetter},

	{method: "GET", path: "/api/outbox", area: areaOutbox, summary: "outbox status", serve: serveOutbox},
	{method: "GET", path: "/api/outbox/parked", area: areaOutbox, summary: "list parked messages",
		query: []param{pCursor, pLimit, pFull}, serve: serveParked},
	{method: "POST", path: "/api/outbox/parked/{id}/retry", area: areaOutbox, mutates: true, summary: "retry parked message",
		body: []param{pReason}, serve: serveRetryParked},
	{method: "POST", path: "/api/outbox/parked/{id}/discard", area: areaOutbox, mutates: true, summary: "discard parked message",
		body: []param{pReason}, serve: serveDiscardParked},

	{method: "GET", path: "/api/queue", area: areaQueue, summary: "queue status", resp: QueueStatus{}, serve: serveQueue},
	{method: "GET", path: "/api/queue/messages", area: areaQueue, summary: "list queue messages",
		query: []param{{name: "topic", typ: "string", doc: "only this topic's messages (default: every topic)"},
			{name: "state", typ: "string", doc: "unfinished (default: ready, running, retrying and scheduled, oldest first) or finished (applied, duplicate, dead, cancelled, acked; newest first, kept for the queue's retention)"},
			pCursor, pLimit},
		resp: QueueMessagePage{}, serve: serveQueueMessages},
	{method: "POST", path: "/api/queue/cancel", area: areaQueue, mutates: true, summary: "cancel queue message",
		body: []param{{name: "topic", typ: "string", required: true, doc: "the message's topic"},
			{name: "id", typ: "string", required: true, doc: "the message's id (message_id of a listing)"}, pReason},
		resp: QueueCancelled{}, serve: serveQueueCancel},

	{method: "GET", path: "/api/effects", area: areaEffects, summary: "list effects",
		query: []param{{name: "state", typ: "string", doc: "pending_past_lease or failed (default: both)"}, pCursor, pLimit},
		serve: serveEffects},
	purgeRoute("/api/effects/purge", areaEffects, "effects", func(h *handler) any { return h.cfg.Effects }),
	{method: "GET", path: "/api/sagas", area: areaSagas, summary: "list sagas",
		query: []param{{name: "state", typ: "string", doc: "running, compensating, completed, compensated, failed or resolved; or parked: the running and compensating sagas an orchestrator set aside"}, pCursor, pLimit},
		serve: serveSagas},
	{method: "GET", path: "/api/sagas/{id}", area: areaSagas, summary: "get saga", serve: serveSaga},
	{method: "POST", path: "/api/sagas/{id}/retry", area: areaSagas, mutates: true, summary: "retry saga step",
		body: []param{pReason}, serve: serveRetrySaga},
	{method: "POST", path: "/api/sagas/{id}/resolve", area: areaSagas, mutates: true, summary: "resolve saga",
		body:  []param{{name: "note", typ: "string", required: true, doc: "what was done by hand, for the audit log (1 to 1024 bytes)"}},
		serve: serveResolveSaga},
	purgeRoute("/api/sagas/purge", areaSagas, "sagas", func(h *handler) any { return h.cfg.Sagas }),

	{method: "GET", path: "/api/stream", area: areaStream, summary: "stream status", serve: serveStream},

	{method: "GET", path: "/api/audit", area: areaAudit, summary: "audit the flow",
		resp: AuditReport{}, serve: serveAudit},
	{method: "POST", path: "/api/audit/repair", area: areaAudit, mutates: true, summary: "repair missing messages",
		body: []param{pReason}, resp: AuditReport{}, serve: serveAuditRepair},
	{method: "GET", path: "/api/audit/repairs", area: areaAudit, summary: "list audit repairs",
		query: []param{{name: "cursor", typ: "string", doc: "the next cursor of the previous page (repairs go newest first); empty for the first"}, pLimit},
		resp:  AuditRepairPage{}, serve: serveAuditRepairs},

	{method: "GET", path: "/api/metrics", area: areaMetrics, summary: "metrics summary", resp: MetricsSummary{}, serve: serveMetrics},
}

// Index is the answer to GET /api/.
type Index struct {
	// Areas says, per area, whether it is configured.
	Areas map[string]bool `json:"areas"`
	// Access is "full", "read" or "none" (Insecure, no token).
	Access  string `json:"access"`
	OpenAPI string `json:"openapi"`
}

func serveIndex(h *handler, r *http.Request, c *call) (any, error) {
	areas := make(map[string]bool, len(h.areas))
	for a, ok := range h.areas {
		if a != areaAPI {
			areas[a] = ok
		}
	}
	return Index{Areas: areas, Access: c.access, OpenAPI: "/api/openapi.json"}, nil
}
