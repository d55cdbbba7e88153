package pgcdc

import (
	"strconv"

	"github.com/jackc/pglogrepl"

	"github.com/idemhq/idem"
)

// The headers every relayed message carries besides its own: where it sits in the log.
// {HeaderLSN, HeaderIndex} is unique within HeaderSource and grows in the order the
// relay publishes (commit order), so a consumer can drop copies with a watermark.
const (
	// HeaderSource names the log: Config.Source, default "database/slot".
	HeaderSource = "idem-source"
	// HeaderLSN is the commit LSN of the message's transaction, as PostgreSQL
	// prints it ("0/16B3748").
	HeaderLSN = "idem-lsn"
	// HeaderIndex is the message's index within its transaction, from 0.
	HeaderIndex = "idem-lsn-index"
)

// Position reads where m sits in its source's log: the SeqFunc of inbox.WithLSN
// (producer = source, epoch = commit LSN, seq = index). ok is false for a message
// that did not come through a CDC relay or whose headers are malformed.
func Position(d idem.Delivery) (source string, lsn, index uint64, ok bool) {
	return MessagePosition(d.Message)
}

// MessagePosition is Position for a message.
func MessagePosition(m idem.Message) (source string, lsn, index uint64, ok bool) {
	source = m.Headers[HeaderSource]
	l, ok1 := m.Headers[HeaderLSN]
	i, ok2 := m.Headers[HeaderIndex]
	if source == "" || !ok1 || !ok2 {
		return "", 0, 0, false
	}
	lsn, err := parseLSN(l)
	if err != nil || lsn == 0 {
		return "", 0, 0, false
	}
	index, err = strconv.ParseUint(i, 10, 32)
	if err != nil {
		return "", 0, 0, false
	}
	return source, lsn, index, true
}

func parseLSN(s string) (uint64, error) {
	l, err := pglogrepl.ParseLSN(s)
	return uint64(l), err
}

// FormatLSN prints lsn as PostgreSQL does.
func FormatLSN(lsn uint64) string { return pglogrepl.LSN(lsn).String() }
