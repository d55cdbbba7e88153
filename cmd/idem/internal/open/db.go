package open

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/internal/redact"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DBSpec is a --db URL, checked without connecting.
type DBSpec struct {
	Dialect string // "postgres", "mysql" or "sqlite"
	Raw     string
	Path    string // sqlite
	Desc    string
}

// DialectOf names the database of a --db URL by its scheme: "postgres", "mysql",
// "sqlite", or "" for none of them.
func DialectOf(raw string) string {
	switch {
	case strings.HasPrefix(raw, "sqlite:"):
		return "sqlite"
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		return "postgres"
	case strings.HasPrefix(raw, "mysql://"):
		return "mysql"
	}
	return ""
}

// ParseDB checks --db without connecting. Its errors are usage errors: they name
// the flag and the fix.
func ParseDB(raw string) (DBSpec, error) {
	d := DBSpec{Dialect: DialectOf(raw), Raw: raw, Desc: redact.URL(raw)}
	if err := cli.CheckURL("--db", raw); err != nil {
		return d, err
	}
	switch d.Dialect {
	case "sqlite":
		d.Path = strings.TrimPrefix(raw, "sqlite:")
		if d.Path == "" {
			return d, errors.New("--db sqlite: needs the path of the service's database, such as sqlite:./app.db")
		}
		if _, err := os.Stat(d.Path); err != nil {
			// Not the error's text: it quotes the path, which is the flag's value.
			return d, fmt.Errorf("--db %s: %s: pass the SQLite file the service writes its outbox to", d.Desc, cli.FileProblem(err))
		}
	case "postgres":
		cfg, err := pgxpool.ParseConfig(raw)
		if err != nil {
			// pgx quotes the URL in its errors (masking the password, not a
			// password=… query parameter).
			return d, fmt.Errorf("--db %s: %s: use postgres://user:pass@host:5432/db", d.Desc, redact.String(err.Error()))
		}
		d.Desc = fmt.Sprintf("postgres (%s:%d/%s)", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	case "mysql":
		return parseMySQLDB(d)
	default:
		return d, fmt.Errorf("--db %q: unknown database; use postgres://user@host:5432/db, mysql://user@host:3306/db or sqlite:PATH", redact.URL(raw))
	}
	return d, nil
}
