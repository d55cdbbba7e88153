package operator

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"os"

	"github.com/idemhq/idem/idemhttp"
)

// maxHeadersFile bounds what `idem keys scope` reads.
const maxHeadersFile = 64 << 10

// keysScope prints the scope under which `idem serve`, run with the same scope
// flags, stores the keys of a request carrying the headers of --headers-file. The
// credentials come from a file (or stdin), never from the command line, where
// they would land in the shell's history and the process list.
func (m *Cmd) keysScope(_ context.Context, o keysScopeOptions) error {
	const cmd = "keys scope"
	if o.headersFile == "" {
		return m.usagef(cmd, "--headers-file is required: a file of the caller's request headers, one 'Name: value' a line, or - for stdin")
	}
	cfg, err := m.ServeScope(ScopeFlags{Header: o.scopeHeader, Trust: o.trustScope,
		CredentialHeaders: o.credentialHeaders, CredentialCookies: o.credentialCookies})
	if err != nil {
		return m.usagef(cmd, "%v", err)
	}
	var in io.Reader = os.Stdin
	if o.headersFile != "-" {
		f, err := os.Open(o.headersFile)
		if err != nil {
			return fmt.Errorf("--headers-file: %w", err)
		}
		defer f.Close()
		in = f
	}
	h, err := textproto.NewReader(bufio.NewReader(io.LimitReader(in, maxHeadersFile))).ReadMIMEHeader()
	if err != nil && !(errors.Is(err, io.EOF) && len(h) > 0) {
		return m.usagef(cmd, "--headers-file: %v: write one 'Name: value' a line (at most %d bytes)", redactHeaderErr(err), maxHeadersFile)
	}
	scope := cfg.Scope
	if scope == nil { // idemhttp.Config's default
		scope = idemhttp.CookieCredentialScope(cfg.CredentialCookies, cfg.CredentialHeaders...)
	}
	r, _ := http.NewRequest(http.MethodPost, "/", nil)
	r.Header = http.Header(h)
	s, err := scope(r)
	if err != nil {
		return &codeError{2, fmt.Errorf("idem keys scope: %w", err)}
	}
	fmt.Fprintln(m.Stdout, s)
	return nil
}

// redactHeaderErr keeps a malformed line, which may hold a credential, out of
// the message.
func redactHeaderErr(err error) string {
	var pe textproto.ProtocolError
	if errors.As(err, &pe) {
		return "a line is not a header"
	}
	return err.Error()
}

type keysScopeOptions struct {
	headersFile, scopeHeader, credentialHeaders, credentialCookies string
	trustScope                                                     bool
}
