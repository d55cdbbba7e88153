// Package admin is idem's operator API: an http.Handler, mountable in any server,
// that serves JSON under /api/ to see and act on idem's state.
//
//	GET  /api/                           configured areas, the caller's access
//	GET  /api/openapi.json               the OpenAPI 3.1 document of every route
//	GET  /api/stores                     names of Config.Stores
//	GET  /api/scopes?store&cursor&limit  a page of the store's scopes (501 if it cannot list them)
//	GET  /api/keys?store&scope&cursor&limit   a page of a scope's records
//	GET  /api/key?store&scope&id[&full=1]     one record, its result as a 64-byte preview
//	POST /api/keys/evict                 {store, scope, id, force, reason}
//	GET  /api/deadletters[?consumer&kind&reason&since&until&cursor&limit]
//	GET  /api/deadletters/{id}
//	POST /api/deadletters/replay         {ids, reason}
//	POST /api/deadletters/{id}/discard   {reason}
//	GET  /api/outbox                     backlog per topic, parked count, relays
//	GET  /api/outbox/parked
//	POST /api/outbox/parked/{id}/retry   {reason}
//	POST /api/outbox/parked/{id}/discard {reason}
//	GET  /api/effects?state=pending_past_lease|failed
//	POST /api/effects/purge              {older_than, reason}: delete complete effects
//	GET  /api/sagas?state  GET /api/sagas/{id}
//	POST /api/sagas/{id}/retry {reason}   POST /api/sagas/{id}/resolve {note}
//	POST /api/sagas/purge                {older_than, reason}: delete finished sagas
//	GET  /api/stream                     channels and connected clients
//	GET  /api/audit                      a read-only end-to-end audit: the audit.Report
//	POST /api/audit/repair               {reason}: an audit that republishes what is missing
//	GET  /api/audit/repairs?cursor&limit the recorded repairs, newest first
//	GET  /api/metrics                    idem_* metrics of Config.Gatherer and of the
//	                                     Config.Metrics sources, summed over labels and sources
//
// Each area is an interface of this package (DeadLetters, Outbox, Effects, Sagas,
// Stream, Audit; the keys area is idem.Inspector, the metrics area a prometheus.Gatherer),
// so any implementation can be mounted; an area left nil in Config answers 404
// ProblemNotConfigured. The adapters to idem's own backends are DeadLettersFrom
// (inbox), OutboxFrom, EffectsFrom, SagasFrom, StreamFrom and AuditFrom (an
// audit.Auditor, which names the consumers: ForSQL cannot); ForSQL sets every
// other area whose tables a database holds. A replay through the inbox is requested (outcome
// "requested"): the letter's running Consumer performs it, exactly once, at its next
// poll. A purge (Purger, which EffectsFrom and SagasFrom implement) deletes only
// finished rows older than older_than (at least MinPurgeAge), never one in
// progress or waiting for an operator, and answers how many it deleted; one cut
// short by Config.Timeout answers complete false, and sending it again goes on.
// The records the areas return (DeadLetter, ParkedMessage, Saga, Effect,
// KeyRecord) and the Preview of their stored bytes are the operator view of
// package admin/view, which idem's CLI (idem keys, dlq, outbox, sagas) prints too:
// one declaration and one rendering for the API, the console and the CLI.
// `idem admin` serves this API and the console (package admin/console) as a
// daemon; `idem serve` and `idem relay` mount the API with --admin-token.
//
// # Safety
//
// Every request needs "Authorization: Bearer <token>": Config.Token for full access,
// Config.ReadToken for GET only (a mutation with it is 403). Tokens are compared in
// constant time and never logged. New refuses a Config without a token unless
// Config.Insecure is set, and then answers only requests addressed to a loopback
// host; daemons call CheckListen to refuse a non-loopback address without a token.
//
// Mutations are POSTs with a JSON object body (Content-Type application/json, at
// most MaxBodyBytes) carrying a required reason (note for resolve). The body names
// each field exactly once, spelt as documented: a field given twice, a name that
// differs in case only ("FORCE"), an unknown name or data after the object is
// refused 400 naming the field, where encoding/json alone would take the last
// value, or match "FORCE" to force. Browsers' cross-site requests are refused
// (Sec-Fetch-Site and Origin against Host), so a foreign web page cannot drive the
// API. Each mutation logs one audit record on Config.Logger: who (token kind,
// remote address, the X-Idem-Actor header), what (route and target), why (the
// reason) and the outcome. Requests refused before their route ran (no or a wrong
// token, the read token on a change, a cross-site change) are counted in
// idem_admin_refused_total{reason}; the audit records of such changes are
// rationed (RefusedLogBurst, then one per RefusedLogEvery, each saying how many
// were left out) and, without a valid token, leave out X-Idem-Actor, which anyone
// can send. Stored results and payloads are shown as a Preview of at most
// PreviewBytes, never whole unless the full-access token asks for ?full=1. A key's
// result that is a response idemhttp stored (idemhttp.DecodeStored) is shown
// decoded too, in its record's http field (StoredHTTP: status, headers, a body
// preview; DecodeStoredHTTP), every string bounded and cleaned.
//
// Config.Metrics names other processes' /metrics endpoints (idem relay's, idem
// serve's): GET /api/metrics reads them at most once per Every, each within
// Timeout and MaxBytes, sums their counters with the local ones, and lists each
// source up or down with the reason, so a figure that is missing is told apart
// from a source that did not answer.
//
// A stored row another service wrote that cannot be decoded whole (a dead letter
// or parked message whose headers are not a JSON object of strings, a saga whose
// results are not a JSON object, on SQLite an effect or a saga's resolution with
// text where a number belongs) is listed and shown like the others, with its
// decode_error, never failing the page around it; it can be discarded (or, a saga,
// resolved), not replayed or retried. A saga the orchestrators set aside, as they
// cannot run it, is marked parked (GET /api/sagas?state=parked lists them), its
// reason saying why; once its row is corrected it can be retried.
//
// Errors are RFC 9457 problems (application/problem+json, the Problem… types):
// idem.ErrNotFound is 404 with a detail naming what was looked for, a bad parameter
// 400 naming it, ErrConflict 409, an *idem.BackendError 503, a timeout
// (Config.Timeout) 504, anything else 500 without its message, which is logged.
//
// Requests are counted as idem_admin_requests_total{route,code} on
// Config.Registerer, refusals also as idem_admin_refused_total{reason}.
package admin
