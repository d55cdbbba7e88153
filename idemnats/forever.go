package idemnats

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/nats-io/nats.go/jetstream"
)

// DedupMode is how a stream, and the sink publishing to it, recognise a message
// published twice. See the package documentation, "Dedup forever".
type DedupMode uint8

const (
	// DedupWindow (the zero value) is JetStream's duplicate window: the stream
	// drops a message whose Nats-Msg-Id it stored within StreamConfig.Duplicates.
	// A republish after the window is stored again (the inbox still drops it).
	DedupWindow DedupMode = iota
	// DedupForever publishes each message to its own subject, Topic + "." + the
	// message's ID (see IDSubject), on a stream that keeps one message per subject
	// and refuses a new one (discard new per subject, max_msgs_per_subject 1). The
	// stream then refuses a second publish of an ID for as long as it keeps the
	// first: forever without MaxAge, not only within the duplicate window.
	DedupForever
)

func (m DedupMode) String() string {
	switch m {
	case DedupWindow:
		return "window"
	case DedupForever:
		return "forever"
	}
	return fmt.Sprintf("DedupMode(%d)", uint8(m))
}

// ErrNotForeverStream is returned (wrapped, with the stream and the setting that
// differs) by VerifyForeverStream, and by a DedupForever sink's Publish, when the
// stream capturing a subject is not set up to keep one message per subject: on
// such a stream a second publish of an ID would be stored, not refused.
var ErrNotForeverStream = errors.New("idemnats: the stream does not refuse a second message per subject (DedupForever needs discard new, discard_new_per_subject and max_msgs_per_subject 1; create it with EnsureStream and StreamConfig.Dedup = DedupForever)")

// idPrefix starts the token of an ID that is not a plain subject token, so an
// encoded ID can never equal a plain one.
const idPrefix = "~"

// IDSubject is the subject a DedupForever sink publishes message id of topic to:
// topic + "." + the ID as one subject token. An ID of letters, digits, '-' and
// '_' (not starting with '~') is the token as it is; any other ID is "~" followed
// by its unpadded base64url encoding. Distinct IDs give distinct subjects, and
// js.GetLastMsgForSubject(IDSubject(topic, id)) finds a message by its ID.
func IDSubject(topic, id string) string {
	return topic + "." + idToken(id)
}

func idToken(id string) string {
	plain := id != "" && !strings.HasPrefix(id, idPrefix)
	for i := 0; plain && i < len(id); i++ {
		c := id[i]
		plain = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
	}
	if plain {
		return id
	}
	return idPrefix + base64.RawURLEncoding.EncodeToString([]byte(id))
}

// jsStoreFailed is the JetStream error code of a message the stream refused to
// store (JSStreamStoreFailedF); the description says which limit refused it.
const jsStoreFailed jetstream.ErrorCode = 10077

// perSubjectLimit is the server's description of a refusal by max_msgs_per_subject.
const perSubjectLimit = "maximum messages per subject exceeded"

// isSubjectTaken reports whether err is the stream refusing a message because its
// subject already holds one: on a DedupForever stream, a duplicate.
func isSubjectTaken(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsStoreFailed && strings.Contains(apiErr.Description, perSubjectLimit)
}

// VerifyForeverStream checks that stream keeps one message per subject and
// refuses a new one (DedupForever). It returns an error wrapping
// ErrNotForeverStream that names the first setting that differs, or a backend
// error if the stream cannot be read.
func VerifyForeverStream(ctx context.Context, js jetstream.JetStream, stream string) error {
	if js == nil {
		return &idem.InputError{Field: "js", Reason: "is nil", Fix: "pass jetstream.New(nc)"}
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return &idem.BackendError{Backend: backend, Op: "verify stream", Err: fmt.Errorf("stream %q: %w", stream, err)}
	}
	return checkForever(stream, st.CachedInfo().Config)
}

func checkForever(stream string, c jetstream.StreamConfig) error {
	var wrong string
	switch {
	case c.Discard != jetstream.DiscardNew:
		wrong = "discard is old, want new"
	case !c.DiscardNewPerSubject:
		wrong = "discard_new_per_subject is false, want true"
	case c.MaxMsgsPerSubject != 1:
		wrong = fmt.Sprintf("max_msgs_per_subject is %d, want 1", c.MaxMsgsPerSubject)
	case c.Retention != jetstream.LimitsPolicy:
		wrong = fmt.Sprintf("retention is %v, want limits (acknowledged or consumed messages would free their IDs)", c.Retention)
	default:
		return nil
	}
	return fmt.Errorf("%w: stream %q: %s", ErrNotForeverStream, stream, wrong)
}

// maxVerified bounds the topics a sink remembers as verified; past it the memory
// starts over (and each topic is verified again once).
const maxVerified = 4096

// verifier checks, once per topic, that a DedupForever sink's subjects land on a
// DedupForever stream.
type verifier struct {
	mu   sync.Mutex
	done map[string]bool
}

func (v *verifier) check(ctx context.Context, js jetstream.JetStream, topic, subject string) error {
	v.mu.Lock()
	ok := v.done[topic]
	v.mu.Unlock()
	if ok {
		return nil
	}
	stream, err := js.StreamNameBySubject(ctx, subject)
	if err != nil {
		return &idem.BackendError{Backend: backend, Op: "publish", Err: fmt.Errorf("finding the stream of subject %q: %w (is it captured by a stream? create one with idemnats.EnsureStream)", subject, err)}
	}
	if err := VerifyForeverStream(ctx, js, stream); err != nil {
		return err
	}
	v.mu.Lock()
	if v.done == nil || len(v.done) >= maxVerified {
		v.done = make(map[string]bool)
	}
	v.done[topic] = true
	v.mu.Unlock()
	return nil
}

// PublishOne publishes m and reports whether the stream already had it: within
// the duplicate window (both modes), or at any time for a DedupForever sink. A
// duplicate is not an error: the message is stored once.
func (s *Sink) PublishOne(ctx context.Context, m idem.Message) (duplicate bool, err error) {
	nm, err := s.message(ctx, m)
	if err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	// Bounded as jetstream bounds it (the caller's deadline, else the JetStream
	// timeout), and cut short when the connection is lost meanwhile (connWatch): a
	// retryable error at once rather than a PubAck that cannot come. It is not
	// retried here: a retry would report this call's own message as a duplicate.
	wait := s.js.Options().DefaultTimeout
	if deadline, ok := ctx.Deadline(); ok {
		wait = time.Until(deadline)
	}
	var ack *jetstream.PubAck
	err = s.watch.request(ctx, wait, func(ctx context.Context) (err error) {
		ack, err = s.js.PublishMsg(ctx, nm)
		return err
	})
	switch {
	case err == nil:
		return ack.Duplicate, nil
	case s.cfg.Dedup == DedupForever && isSubjectTaken(err):
		return true, nil
	}
	return false, s.fail(ctx, 0, 1, nm, err)
}
