package idemnats

import (
	"context"
	"fmt"

	"github.com/idemhq/idem"
)

var _ idem.LagReporter = (*Source)(nil)

// Lag asks JetStream for the durable consumer's info (one request) and returns
// NumPending (messages of the stream matching the consumer's filter, not yet
// delivered) plus NumAckPending (delivered, not yet acknowledged, whichever
// source of the durable holds them). Both are the server's exact counts; messages
// a Nak with delay holds back count as ack pending until they come back.
func (s *Source) Lag(ctx context.Context) (idem.Lag, error) {
	info, err := s.cons.Info(ctx)
	if err != nil {
		return idem.Lag{}, &idem.BackendError{Backend: backend, Op: "consumer info",
			Err: fmt.Errorf("durable %q on stream %q: %w", s.cfg.Durable, s.cfg.Stream, err)}
	}
	return idem.Lag{Messages: int64(info.NumPending) + int64(info.NumAckPending)}, nil
}
