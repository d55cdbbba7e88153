package idemsql

import (
	"fmt"
	"sync"

	"github.com/idemhq/idem"
)

// Driver is everything idem says to one database about its own tables: the text
// of every statement its components run (the records of the SQL stores, the
// outbox, the inbox's dead letters and replays, effects, sagas, the stream's
// event log, sequence trackers, migrations), grouped by family, and the
// behaviour a statement family needs beyond its text (a READ COMMITTED
// transaction, a lock clause). The components hold no SQL text and never ask
// which database they run on: they ask the Driver of their TxDB.
//
// idempg, idemsqlite and idemmysql are the drivers; each registers itself when
// imported, so SQLDB can find the driver of a database/sql handle. A new
// database implements Driver in its own package, adds its migration set to
// package migrate, and passes drivertest.Run, which checks every family against
// a real server.
//
// A family's statements use $1 placeholders; a driver whose database takes ?
// rewrites them in its Querier (see Rebind). A Driver is stateless and safe for
// concurrent use: the families it returns are shared and must not be modified.
type Driver interface {
	// Dialect names the database, for errors, metrics and migrations.
	Dialect() Dialect
	// Records is the statements of the SQL stores' records table.
	Records() *RecordsSQL
	// Outbox is the statements of package outbox: enqueue, the relay's claim
	// and retirement, parking, cleanup, instances, and the operator's view.
	Outbox() *OutboxSQL
	// Inbox is the statements of package inbox beyond the key records: dead
	// letters, replay requests and LSN positions.
	Inbox() *InboxSQL
	// Effect is the statements of package effect's fences.
	Effect() *EffectSQL
	// Saga is the statements of package effect/saga.
	Saga() *SagaSQL
	// Stream is the statements of package stream's SQL event store.
	Stream() *StreamSQL
	// Seq is the statements of package idemseq's SQL sequence tracker.
	Seq() *SeqSQL
	// Queue is the statements of package queue: the database as the queue
	// (enqueue, claims and their leases, retirement, cancellation, periodic
	// schedules, retention, the operator's view).
	Queue() *QueueSQL
	// Migrate is how package migrate keeps idem_migrations and locks out other
	// migrators.
	Migrate() *MigrateSQL
}

var (
	registryMu sync.RWMutex
	registry   = map[Dialect]Driver{}
)

// Register makes d the driver SQLDB uses for a database of d.Dialect(). The
// driver packages call it from init; registering a dialect twice panics, as
// database/sql.Register does.
func Register(d Driver) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if d == nil {
		panic("idemsql: Register of a nil Driver")
	}
	if _, dup := registry[d.Dialect()]; dup {
		panic("idemsql: Register called twice for " + d.Dialect().String())
	}
	registry[d.Dialect()] = d
}

// DriverFor returns the registered driver of dialect d, or an *idem.InputError
// that names the package to import.
func DriverFor(d Dialect) (Driver, error) {
	registryMu.RLock()
	drv, ok := registry[d]
	registryMu.RUnlock()
	if !ok {
		return nil, &idem.InputError{Field: "driver", Reason: fmt.Sprintf("for %s is not registered", d),
			Fix: "import " + driverPackage(d) + " (a blank import is enough), or build the TxDB with its constructor"}
	}
	return drv, nil
}

func driverPackage(d Dialect) string {
	switch d {
	case Postgres:
		return "github.com/idemhq/idem/idempg"
	case SQLite:
		return "github.com/idemhq/idem/idemsqlite"
	case MySQL:
		return "github.com/idemhq/idem/idemmysql"
	}
	return "the driver package of " + d.String()
}
