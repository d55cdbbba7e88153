package audit_test

import (
	"context"
	"database/sql"
	"log"
	"os"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/audit"
	_ "github.com/idemhq/idem/idemmysql" // idem's statements for MySQL, which idemsql.SQLDB finds
	_ "github.com/idemhq/idem/idempg"    // and for PostgreSQL
	"github.com/idemhq/idem/idemsql"
)

// The orders service enqueues in PostgreSQL; the ledger service consumes
// "orders" with an inbox in MySQL. An audit every few minutes reconciles the
// two, republishes what the broker acknowledged and lost, and states the
// sentence of the flow. (It needs the two databases, so it is not run here.)
func Example() {
	ctx := context.Background()
	orders, err := sql.Open("pgx", "postgres://orders@db/orders")
	if err != nil {
		log.Fatal(err)
	}
	ledgerDB, err := sql.Open("mysql", "ledger@tcp(mysql:3306)/ledger")
	if err != nil {
		log.Fatal(err)
	}
	producer, err := idemsql.SQLDB(ctx, orders)
	if err != nil {
		log.Fatal(err)
	}
	consumers, err := idemsql.SQLDB(ctx, ledgerDB)
	if err != nil {
		log.Fatal(err)
	}

	ledger, err := audit.ConsumersIn(consumers, audit.Consumer{Name: "ledger", Topics: []string{"orders"}})
	if err != nil {
		log.Fatal(err)
	}
	auditor, err := audit.New(producer, audit.Config{
		Repair:     true,
		Deliveries: audit.ScrapeDeliveries(nil, "http://ledger:9090/metrics"),
		Registerer: prometheus.DefaultRegisterer,
	}, ledger)
	if err != nil {
		log.Fatal(err)
	}
	rep, err := auditor.Run(ctx)
	if err != nil {
		log.Fatal(err)
	}
	rep.WriteText(os.Stdout)

	// Or keep auditing, each run's figures in the idem_audit_* metrics.
	go auditor.Loop(ctx, 5*time.Minute, func(rep *audit.Report, err error) {
		if err == nil && rep.Missing() > 0 {
			log.Print(rep.Sentence())
		}
	})
}
