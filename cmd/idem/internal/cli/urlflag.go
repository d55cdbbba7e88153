package cli

import (
	"errors"
	"io/fs"
	"net/url"
	"strings"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/redact"
)

// CheckURL refuses, in idem's words, the value of a URL flag that a URL parser
// would refuse or misread. Every flag's parse calls it first (parseStore, parseDB,
// parseSink, openMigrateDB, openVerifyDB, openVerifyBroker, serve's --upstream,
// $OTEL_EXPORTER_OTLP_ENDPOINT), so that:
//
//   - no parser's error text is quoted: Go's, and the drivers' built on it, quote
//     the piece of the URL they choke on, which for a password holding # / ? @ or
//     % is a piece of the password (invalid port ":pa", invalid URL escape "%zz");
//   - no URL is used whose userinfo the parser split at the wrong place: with an
//     "@" after its host (postgres://app:12/pw@db parses as host app, port 12,
//     database "pw@db"; https://TOKEN/x@host as host TOKEN), the description
//     printed from the parsed host, port and path, or the DNS error about the
//     host, would hold the secret's pieces.
//
// The library parsers that run after it (pgx, go-redis, amqp, the MySQL DSN) may
// still refuse a setting (sslmode=bogus, an unknown option); their text is then
// about that setting, and is quoted through redact.String.
//
// An "@" that belongs to a path or a query (https://h/in?email=a@b.example) must be
// written %40: nothing tells it from a password's. A value without "://"
// (sqlite:PATH, memory:, nats:) has no userinfo and passes.
func CheckURL(flag, raw string) error {
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok {
		return nil
	}
	parts := []string{raw}
	if scheme == "nats" || scheme == "tls" {
		parts = strings.Split(raw, ",") // a list of servers, as nats.Connect takes
	}
	for _, p := range parts {
		if u, err := url.Parse(p); err != nil || redact.AtAfterHost(u) {
			return &idem.InputError{Field: flag, Reason: redact.URL(raw) + " is not a URL idem can read",
				Fix: "percent-encode # / ? @ % and spaces in its user name and password (as %23 %2F %3F %40 %25 %20), and an @ in its path or query"}
		}
	}
	return nil
}

// FileProblem says why a file named by a flag cannot be used, without the error's
// text, which quotes the path: the flag's value, credentials and all.
func FileProblem(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "no such file"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	}
	return "the file cannot be read"
}
