package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemsqlite"
)

// ReasonOf names what failed in words that are idem's, not the downstream's: a
// status code, an errno, a protocol error code. It never quotes an error's text,
// which may hold a URL, a response body or a server's message.
func ReasonOf(err error) string {
	var (
		status *idemhttp.StatusError
		pg     *pgconn.PgError
		ke     *kerr.Error
		ae     *amqp.Error
		dns    *net.DNSError
		ne     net.Error
		in     *idem.InputError
		be     *idem.BackendError
	)
	switch {
	case errors.As(err, &status):
		return fmt.Sprintf("webhook returned %d", status.StatusCode)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "host unreachable"
	case errors.As(err, &dns):
		return "host name not found"
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return "no responders: no JetStream stream holds the subject"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	case errors.Is(err, idemsqlite.ErrDiskFull), errors.Is(err, syscall.ENOSPC):
		return "disk full: free space on the database's volume"
	case errors.As(err, &pg) && pg.Code == "53100": // disk_full: a table or index could not grow
		return "postgres error SQLSTATE 53100 (disk full: free space on the volume of the table's tablespace)"
	case errors.As(err, &pg):
		return "postgres error SQLSTATE " + pg.Code
	case errors.As(err, &ke):
		return "kafka error " + ke.Message
	case errors.As(err, &ae):
		return fmt.Sprintf("amqp error %d", ae.Code)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed), errors.Is(err, nats.ErrConnectionClosed):
		return "connection closed"
	case errors.As(err, &in):
		return "invalid message (" + in.Field + ")"
	case errors.Is(err, idem.ErrLeaseLost):
		return "lease lost"
	case errors.As(err, &be):
		return be.Backend + " " + be.Op + " failed (details in the log)"
	}
	return "failed (details in the log)"
}
