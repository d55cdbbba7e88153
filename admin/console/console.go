// Package console is idem's web console: one page, mounted at "/" of the admin API
// (admin.Config.Console), that shows what needs an operator's attention and acts on
// it through the API under "api/".
//
//	h, err := admin.New(admin.Config{Token: token, Console: console.Handler(), …})
//
// The page shows live rates as small charts (claims, duplicates suppressed, replays,
// 409s, dead letters, outbox backlog and age, relay throughput and lag, polled from
// GET /api/metrics), the dead letters, parked outbox messages, failed and
// compensating sagas and stuck or failed effects with their actions (replay,
// discard, retry, resolve), a scope's keys with the stuck ones (in progress past
// their lease) singled out and evictable, and a key lookup that shows the stored
// result as a preview unless the full-access token asks for all of it.
//
// It asks for the API token once and keeps it in the tab's sessionStorage only,
// sending it as "Authorization: Bearer" on each call; every action asks for the
// reason the API records in its audit log.
//
// # Safety
//
// Everything is embedded (no CDN, no build step). Every response carries a strict
// Content-Security-Policy (scripts and styles from this origin only, no inline
// code, connections to this origin only, no framing, no form submission, Trusted
// Types required so that no string can become markup), X-Content-Type-Options
// nosniff, Referrer-Policy no-referrer and X-Frame-Options DENY. The page puts
// strings from the API into the document as text only: payloads, reasons and key
// ids may come from an attacker. Only GET and HEAD are answered (405 otherwise),
// and only the page's own files (404 otherwise).
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"time"
)

//go:embed static
var static embed.FS

// ContentSecurityPolicy is the policy sent with every response of Handler.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; " +
	"require-trusted-types-for 'script'; trusted-types 'none'"

// The page's files, by URL path.
var files = map[string]struct{ name, contentType string }{
	"/":            {"index.html", "text/html; charset=utf-8"},
	"/console.js":  {"console.js", "text/javascript; charset=utf-8"},
	"/console.css": {"console.css", "text/css; charset=utf-8"},
	"/favicon.svg": {"favicon.svg", "image/svg+xml"},
}

type asset struct {
	body        []byte
	contentType string
	etag        string
}

type handler struct {
	assets map[string]asset
}

// Handler returns the console: the page at "/" and its files, for
// admin.Config.Console. It can also be mounted under a prefix with
// http.StripPrefix, next to the admin API at the same prefix: the page calls
// "api/" relative to itself.
func Handler() http.Handler {
	h := &handler{assets: make(map[string]asset, len(files))}
	for path, f := range files {
		b, err := fs.ReadFile(static, "static/"+f.name)
		if err != nil {
			panic("console: embedded file missing: " + err.Error()) // a build without the files
		}
		sum := sha256.Sum256(b)
		h.assets[path] = asset{body: b, contentType: f.contentType, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", ContentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	hd.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=(), usb=()")
	// Revalidate each time: a new build's page must not run against a cached script.
	hd.Set("Cache-Control", "no-cache")

	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		http.Error(w, "405 method not allowed: the console answers GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	a, ok := h.assets[r.URL.Path]
	if !ok {
		http.Error(w, "404 page not found", http.StatusNotFound)
		return
	}
	hd.Set("Content-Type", a.contentType)
	hd.Set("ETag", a.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}
