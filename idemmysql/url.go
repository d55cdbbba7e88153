package idemmysql

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemhq/idem"
)

// DefaultDialTimeout bounds connecting when the URL sets no timeout.
const DefaultDialTimeout = 10 * time.Second

// DSN turns a URL of the form every idem command takes,
//
//	mysql://user:password@host:3306/database?param=value
//
// into the DSN of github.com/go-sql-driver/mysql. The query parameters are the
// driver's (tls, timeout, readTimeout, charset, collation, tx_isolation and other
// system variables...). The port defaults to 3306, the dial timeout to
// DefaultDialTimeout, interpolateParams to true (one round trip per statement), and
// the session time zone of parsed times to UTC.
func DSN(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "mysql" || u.Host == "" {
		return "", &idem.InputError{Field: "url", Reason: fmt.Sprintf("%q is not a mysql:// URL", redacted(raw)),
			Fix: "use mysql://user:password@host:3306/database"}
	}
	cfg, err := mysql.ParseDSN("/?" + u.RawQuery)
	if err != nil {
		return "", &idem.InputError{Field: "url", Reason: "has a bad parameter: " + err.Error(),
			Fix: "use the parameters of github.com/go-sql-driver/mysql, e.g. ?timeout=5s&tls=true"}
	}
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net, cfg.Addr = "tcp", u.Host
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		cfg.Addr = net.JoinHostPort(strings.Trim(u.Host, "[]"), "3306")
	}
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	if cfg.DBName == "" || strings.Contains(cfg.DBName, "/") {
		return "", &idem.InputError{Field: "url", Reason: fmt.Sprintf("%q names no database", redacted(raw)),
			Fix: "end the URL with the database: mysql://user@host:3306/shop"}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultDialTimeout
	}
	if !u.Query().Has("interpolateParams") {
		// Send a statement with its arguments in one round trip instead of
		// preparing, executing and closing it. The driver escapes the values, and
		// refuses the character sets (BIG5, SJIS, GBK...) where that is unsafe.
		cfg.InterpolateParams = true
	}
	return cfg.FormatDSN(), nil
}

// redacted is raw without its password, for messages.
func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}
