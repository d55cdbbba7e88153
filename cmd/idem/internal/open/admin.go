package open

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/redact"
	"github.com/idemhq/idem/outbox"
)

// AdminDB connects --db and sets cfg's areas of the components whose tables it
// holds (admin.ForSQL: no DDL); skipped names the others.
func AdminDB(ctx context.Context, db DBSpec, cfg *admin.Config) (ping func(context.Context) error, close func(), skipped map[string]error, err error) {
	switch db.Dialect {
	case "postgres":
		pool, err := Postgres(ctx, "--db", db.Desc, db.Raw)
		if err != nil {
			return nil, nil, nil, err
		}
		ping, close = pool.Ping, pool.Close
		skipped, err = admin.ForSQL(ctx, idempg.TxDB(pool), cfg)
		return adminDBOpened(db, ping, close, skipped, err)
	case "mysql":
		mdb, err := openMySQL(ctx, "--db", db.Desc, db.Raw)
		if err != nil {
			return nil, nil, nil, err
		}
		ping, close = mdb.PingContext, func() { mdb.Close() }
		skipped, err = admin.ForSQL(ctx, idemmysql.TxDB(mdb), cfg)
		return adminDBOpened(db, ping, close, skipped, err)
	case "sqlite":
		sdb, err := SQLite(db.Path)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--db %s: %w", db.Desc, err)
		}
		ping, close = sdb.PingContext, func() { sdb.Close() }
		txdb, err := idemsql.SQLDB(ctx, sdb)
		if err == nil {
			skipped, err = admin.ForSQL(ctx, txdb, cfg)
		}
		return adminDBOpened(db, ping, close, skipped, err)
	}
	return nil, nil, nil, fmt.Errorf("--db %s: unknown database", db.Desc)
}

// adminDBOpened closes what AdminDB opened if err is set.
func adminDBOpened(db DBSpec, ping func(context.Context) error, close func(), skipped map[string]error, err error) (func(context.Context) error, func(), map[string]error, error) {
	if err != nil {
		close()
		return nil, nil, nil, fmt.Errorf("--db %s: %w", db.Desc, redact.Error(err))
	}
	return ping, close, skipped, nil
}

// OutboxArea is the admin area of relay's outbox.
func OutboxArea[Tx any](db idemsql.TxDB[Tx]) admin.Outbox {
	return admin.OutboxFrom(outbox.NewAdmin(db))
}
