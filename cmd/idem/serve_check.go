package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemhttp/gateway"
	"github.com/idemhq/idem/internal/redact"
)

// serveSpec is what check derived from the flags: the middleware's configuration
// without its store, registry and logger, which serve supplies.
type serveSpec struct {
	upstream *url.URL
	store    open.StoreSpec
	cfg      idemhttp.Config
	webhook  *webhookSpec // nil without --webhook
}

var tokenRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$") // RFC 9110 token

// check validates the flags before anything connects; its errors name the flag.
func (o *serveOptions) check() (serveSpec, error) {
	var s serveSpec
	if o.upstream == "" {
		return s, errors.New("--upstream is required: the URL of the service behind the gateway, such as http://127.0.0.1:9000 (or set $IDEM_UPSTREAM)")
	}
	if err := cli.CheckURL("--upstream", o.upstream); err != nil {
		return s, err
	}
	u, err := url.Parse(o.upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return s, fmt.Errorf("--upstream %q: not an http:// or https:// URL with a host; use http://host:port[/base-path]", redact.URL(o.upstream))
	}
	s.upstream = u
	for _, a := range [][2]string{{"--listen", o.listen}, {"--admin-listen", o.admin}} {
		if _, _, err := net.SplitHostPort(a[1]); err != nil && (a[1] != "" || a[0] == "--listen") {
			return s, fmt.Errorf("%s %q: %v: use host:port, such as 127.0.0.1:8080 or :8080", a[0], a[1], err)
		}
	}
	if s.store, err = open.ParseStore(o.store); err != nil {
		return s, err
	}
	switch {
	case o.wait < 0:
		return s, fmt.Errorf("--wait must be 0 (answer 409) or positive, such as 10s (got %v)", o.wait)
	case o.lease <= 0:
		return s, fmt.Errorf("--lease must be positive, such as 30s (got %v)", o.lease)
	case o.retention <= 0:
		return s, fmt.Errorf("--retention must be positive, such as 24h (got %v)", o.retention)
	case o.drainLimit <= 0:
		return s, fmt.Errorf("--shutdown-timeout must be positive, such as 30s (got %v)", o.drainLimit)
	case o.maxBody <= 0:
		return s, fmt.Errorf("--max-body must be positive, such as 1MiB (got %d)", o.maxBody)
	case o.maxConns <= 0:
		return s, fmt.Errorf("--max-conns must be positive, such as %d (got %d)", gateway.DefaultMaxConns, o.maxConns)
	case o.maxInFlight <= 0:
		return s, fmt.Errorf("--max-inflight must be positive, such as %d (got %d)", idemhttp.DefaultMaxInFlight, o.maxInFlight)
	case o.upstreamTimeout <= 0:
		return s, fmt.Errorf("--upstream-timeout must be positive, such as 60s (got %v)", o.upstreamTimeout)
	case o.readTimeout <= 0 || o.idleTimeout <= 0:
		return s, fmt.Errorf("--read-timeout and --idle-timeout must be positive, such as 30s and 2m (got %v and %v)", o.readTimeout, o.idleTimeout)
	case o.requireTimedKeys && o.keyMaxAge < 0:
		return s, fmt.Errorf("--require-timed-keys needs the key age check that --key-max-age %v turns off: drop one of them", o.keyMaxAge)
	case o.writeTimeout < 0:
		return s, fmt.Errorf("--write-timeout must be positive, or 0 for the default (got %v)", o.writeTimeout)
	case o.writeTimeout == 0:
		o.writeTimeout = o.readTimeout + o.upstreamTimeout + o.wait + 5*time.Second
	case o.writeTimeout <= o.upstreamTimeout+o.wait:
		// net/http's write deadline runs from the end of the request's headers: it
		// must leave room for the upstream call (and the wait before it), or a slow
		// but successful upstream's response is cut and never reaches the client.
		return s, fmt.Errorf("--write-timeout %v must be longer than --upstream-timeout + --wait (%v + %v = %v), which it covers (with the time to read the body): raise it, such as to %v",
			o.writeTimeout, o.upstreamTimeout, o.wait, o.upstreamTimeout+o.wait, o.readTimeout+o.upstreamTimeout+o.wait+5*time.Second)
	}
	s.cfg, err = o.middlewareConfig()
	return s, err
}

// middlewareConfig maps the flags to the middleware's configuration, checked.
func (o *serveOptions) middlewareConfig() (idemhttp.Config, error) {
	c := idemhttp.Config{RequireKey: o.requireKey, Wait: o.wait, Lease: o.lease, Retention: o.retention,
		MaxKeyAge: o.keyMaxAge, RequireTimedKeys: o.requireTimedKeys, MaxBodyBytes: int64(o.maxBody), StoreServerErrors: &o.store5xx, MaxInFlight: o.maxInFlight,
		KeyHeader: o.keyHeader, KeyJSONField: o.keyJSONField, AllowCommonKeyField: o.allowCommonKeyField}
	if o.keyHeader != "" && o.keyJSONField != "" {
		return c, errors.New("--key-header and --key-json-field are both set: take the key from one place")
	}
	switch o.oversize {
	case "reject":
		c.Oversize = idemhttp.Reject413
	case "pass":
		c.Oversize = idemhttp.PassThrough
	default:
		return c, fmt.Errorf("--oversize %q: use 'reject' (413) or 'pass' (proxied without idempotency)", o.oversize)
	}
	var err error
	c.Methods, err = headerList("--methods", o.methods, true)
	if err == nil && len(c.Methods) == 0 {
		err = errors.New("--methods is empty: list the methods that take an Idempotency-Key, such as POST,PATCH")
	}
	for _, m := range c.Methods {
		if m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions {
			err = fmt.Errorf("--methods lists %s, which is safe by HTTP semantics and must not be replayed from a store: list methods with effects, such as POST,PATCH", m)
		}
	}
	if err == nil {
		c.FingerprintHeaders, err = headerList("--fingerprint-headers", o.fingerprintHeaders, false)
	}
	if err == nil {
		c.ReplayHeaders, err = headerList("--replay-headers", o.replayHeaders, false)
	}
	if err == nil {
		c.CredentialHeaders, err = headerList("--credential-headers", o.credentialHeaders, false)
		if c.CredentialHeaders == nil {
			c.CredentialHeaders = []string{} // none beside the three always hashed
		}
	}
	if err == nil {
		// Cookie names are tokens too (RFC 6265 §4.1.1).
		c.CredentialCookies, err = headerList("--credential-cookies", o.credentialCookies, false)
	}
	if err != nil {
		return c, err
	}
	if h := o.scopeHeader; h != "" {
		switch {
		case !tokenRE.MatchString(h):
			return c, fmt.Errorf("--scope-header %q is not an HTTP header name", h)
		case slices.Contains([]string{"authorization", "proxy-authorization", "cookie"}, strings.ToLower(h)):
			return c, fmt.Errorf("--scope-header %s would store credentials in clear: leave it out, the default scope is a hash of every credential the request carries", h)
		}
		c.Scope = idemhttp.TenantScope(h, idemhttp.CookieCredentialScope(c.CredentialCookies, c.CredentialHeaders...))
		if o.trustScope {
			c.Scope = idemhttp.TrustedHeaderScope(h)
		}
	} else if o.trustScope {
		return c, errors.New("--trust-scope-header needs --scope-header: name the header your trusted proxy sets")
	}
	return c, nil
}

// headerList splits a comma-separated flag into HTTP tokens (upper-cased for methods);
// empty gives nil, the middleware's default.
func headerList(flagName, v string, upper bool) ([]string, error) {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !tokenRE.MatchString(f) {
			return nil, fmt.Errorf("%s: %q is not an HTTP token; separate names with commas", flagName, f)
		}
		if upper {
			f = strings.ToUpper(f)
		}
		out = append(out, f)
	}
	return out, nil
}

// byteSize is a flag holding a size in bytes, written as a number with an optional
// KiB, MiB or GiB suffix.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	num, mult := strings.TrimSpace(s), int64(1)
	for i, suffix := range []string{"KiB", "MiB", "GiB"} {
		if rest, ok := strings.CutSuffix(num, suffix); ok {
			num, mult = strings.TrimSpace(rest), int64(1)<<(10*(i+1))
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return fmt.Errorf("%q is not a size: use bytes, or a number with KiB, MiB or GiB, such as 1MiB", s)
	}
	*b = byteSize(n * mult)
	return nil
}

// keySourceFlags names the flags in an error of the middleware about where keys
// come from (Config.KeyHeader, Config.KeyJSONField), as the user set them.
func keySourceFlags(err error) error {
	ie, ok := errors.AsType[*idem.InputError](err)
	if !ok {
		return err
	}
	flag, ok := map[string]string{"Config.KeyHeader": "--key-header", "Config.KeyJSONField": "--key-json-field"}[ie.Field]
	if !ok {
		return err
	}
	e := *ie
	e.Field = flag
	e.Fix = strings.ReplaceAll(e.Fix, "AllowCommonKeyField", "--allow-common-key-field")
	return &e
}
