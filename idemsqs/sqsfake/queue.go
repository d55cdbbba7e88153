package sqsfake

import (
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/idemsqs/internal/sqsrules"
)

type queue struct {
	name, url    string
	fifo         bool
	contentDedup bool
	visibility   time.Duration
	maxSize      int
	wait         int // ReceiveMessageWaitTimeSeconds
	created      time.Time

	msgs    []*message          // in send order; deleted ones are dropped in compact
	deleted int                 // deleted entries still in msgs
	handles map[string]*message // every receipt handle ever issued for a live message
	dedup   map[string]dedupEntry
	retries map[string]attempt // by ReceiveRequestAttemptId
	seq     uint64
	changed chan struct{} // closed and replaced when a message may have become receivable
}

// attempt is what one ReceiveMessage with a ReceiveRequestAttemptId returned: a
// retry of that call (the SDK retries with the same id) gets the same messages and
// receipt handles back, while they are still in flight unchanged, instead of
// leaving them invisible to everyone.
type attempt struct {
	expires time.Time
	msgs    []*message
	handles []string
}

// retried returns the messages a receive with id already took, if it may have
// them again.
func (q *queue) retried(id string, now time.Time) ([]*message, bool) {
	a, ok := q.retries[id]
	if !ok || !now.Before(a.expires) {
		return nil, false
	}
	for i, m := range a.msgs {
		if m.deleted || m.handle != a.handles[i] || !m.visibleAt.After(now) {
			return nil, false
		}
	}
	return a.msgs, true
}

// remember records what a receive with id took.
func (q *queue) remember(id string, msgs []*message, now time.Time) {
	if id == "" || !q.fifo || len(msgs) == 0 {
		return
	}
	if len(q.retries) >= 4096 {
		for k, a := range q.retries {
			if !now.Before(a.expires) || len(q.retries) >= 4096 {
				delete(q.retries, k)
			}
		}
	}
	a := attempt{expires: now.Add(DedupWindow), msgs: msgs, handles: make([]string, len(msgs))}
	for i, m := range msgs {
		a.handles[i] = m.handle
	}
	q.retries[id] = a
}

type dedupEntry struct {
	expires time.Time
	id      string
	seq     string
}

type message struct {
	id, body     string
	group, dedup string
	seq          string
	attrs        map[string]attrValue
	sent         time.Time
	visibleAt    time.Time // in flight while after now
	received     time.Time // the latest receive
	firstRecv    time.Time
	handle       string // the latest receipt handle
	receives     int
	deleted      bool
}

func (q *queue) notify() {
	close(q.changed)
	q.changed = make(chan struct{})
}

func newHandle() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// sendEntry is one message to send, from SendMessage or a batch entry.
type sendEntry struct {
	Id                     string               `json:"Id,omitempty"`
	MessageBody            *string              `json:"MessageBody"`
	DelaySeconds           int                  `json:"DelaySeconds,omitempty"`
	MessageAttributes      map[string]attrValue `json:"MessageAttributes,omitempty"`
	MessageDeduplicationId string               `json:"MessageDeduplicationId,omitempty"`
	MessageGroupId         string               `json:"MessageGroupId,omitempty"`
}

type sent struct {
	id, md5, seq string
}

// check validates e for q and returns its size (body and attributes).
func (q *queue) check(e sendEntry) (int, *apiError) {
	if e.MessageBody == nil || *e.MessageBody == "" {
		return 0, &apiError{400, "MissingParameter", "MissingParameter", "The request must contain the parameter MessageBody."}
	}
	if i := sqsrules.ValidText(*e.MessageBody); i >= 0 {
		return 0, &apiError{400, "InvalidMessageContents", "InvalidMessageContents", fmt.Sprintf("Invalid characters found in the message body at byte %d.", i)}
	}
	asize, aerr := checkAttributes(e.MessageAttributes)
	if aerr != nil {
		return 0, aerr
	}
	size := len(*e.MessageBody) + asize
	if size > q.maxSize {
		return 0, errInvalid("One or more parameters are invalid. Reason: Message must be shorter than %d bytes (got %d).", q.maxSize, size)
	}
	if e.DelaySeconds != 0 {
		if q.fifo {
			return 0, errInvalid("Value %d for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type.", e.DelaySeconds)
		}
		return 0, &apiError{400, "UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", "sqsfake does not implement DelaySeconds"}
	}
	if !q.fifo {
		if e.MessageDeduplicationId != "" {
			return 0, errInvalid("The request include parameter MessageDeduplicationId that is not valid for this queue type.")
		}
		return size, nil
	}
	if e.MessageGroupId == "" {
		return 0, &apiError{400, "MissingParameter", "MissingParameter", "The request must contain the parameter MessageGroupId."}
	}
	if err := sqsrules.GroupOrDedupID(e.MessageGroupId); err != nil {
		return 0, errInvalid("Value %q for parameter MessageGroupId is invalid: it %v.", e.MessageGroupId, err)
	}
	if e.MessageDeduplicationId == "" && !q.contentDedup {
		return 0, errInvalid("The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
	}
	if e.MessageDeduplicationId != "" {
		if err := sqsrules.GroupOrDedupID(e.MessageDeduplicationId); err != nil {
			return 0, errInvalid("Value %q for parameter MessageDeduplicationId is invalid: it %v.", e.MessageDeduplicationId, err)
		}
	}
	return size, nil
}

// send enqueues a checked entry, or, for a FIFO duplicate within the window,
// answers as SQS does: success, with the first copy's message id.
func (q *queue) send(e sendEntry, now time.Time, newID func() string) sent {
	body := *e.MessageBody
	out := sent{md5: md5Hex(body)}
	var dedupID string
	if q.fifo {
		dedupID = e.MessageDeduplicationId
		if dedupID == "" {
			sum := sha256.Sum256([]byte(body))
			dedupID = hex.EncodeToString(sum[:])
		}
		if d, ok := q.dedup[dedupID]; ok && now.Before(d.expires) {
			out.id, out.seq = d.id, d.seq
			return out
		}
	}
	q.seq++
	m := &message{id: newID(), body: body, group: e.MessageGroupId, dedup: dedupID, attrs: e.MessageAttributes, sent: now}
	if q.fifo {
		m.seq = fmt.Sprintf("%020d", q.seq)
		q.pruneDedup(now)
		q.dedup[dedupID] = dedupEntry{expires: now.Add(DedupWindow), id: m.id, seq: m.seq}
	}
	q.msgs = append(q.msgs, m)
	out.id, out.seq = m.id, m.seq
	return out
}

// pruneDedup forgets expired dedup ids once there are many.
func (q *queue) pruneDedup(now time.Time) {
	if len(q.dedup) < 4096 || len(q.dedup)%1024 != 0 {
		return
	}
	for id, d := range q.dedup {
		if !now.Before(d.expires) {
			delete(q.dedup, id)
		}
	}
}

// take receives up to max messages. A standard queue returns visible messages in
// order. A FIFO queue skips every group with a message in flight and, as SQS
// documents, returns as many messages of one group as it can before the next group,
// so other consumers can work on other groups.
func (q *queue) take(max int, visibility time.Duration, now time.Time) []*message {
	var out []*message
	receive := func(m *message) {
		m.receives++
		m.received = now
		if m.firstRecv.IsZero() {
			m.firstRecv = now
		}
		m.handle = newHandle()
		q.handles[m.handle] = m
		m.visibleAt = now.Add(visibility)
		out = append(out, m)
	}
	if !q.fifo {
		for _, m := range q.msgs {
			if !m.deleted && !m.visibleAt.After(now) {
				receive(m)
				if len(out) == max {
					break
				}
			}
		}
		return out
	}
	busy := map[string]bool{} // groups in flight, and groups already taken from
	for _, m := range q.msgs {
		if !m.deleted && m.visibleAt.After(now) {
			busy[m.group] = true
		}
	}
	for i := 0; i < len(q.msgs) && len(out) < max; i++ {
		first := q.msgs[i]
		if first.deleted || busy[first.group] {
			continue
		}
		busy[first.group] = true
		for _, m := range q.msgs[i:] {
			if !m.deleted && m.group == first.group {
				receive(m)
				if len(out) == max {
					break
				}
			}
		}
	}
	return out
}

// remove deletes the message of a receipt handle. As SQS documents, a handle that
// is not the message's latest succeeds without deleting it, and deleting a deleted
// message succeeds.
func (q *queue) remove(handle string) *apiError {
	m := q.handles[handle]
	if m == nil {
		return &apiError{400, "ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", fmt.Sprintf("The input receipt handle %q is not a valid receipt handle.", handle)}
	}
	if m.deleted || m.handle != handle {
		return nil
	}
	m.deleted = true
	q.deleted++
	if q.fifo {
		q.notify() // its group may be free now
	}
	q.compact()
	return nil
}

// compact drops deleted messages and their handles once they are half the queue.
func (q *queue) compact() {
	if q.deleted < 1024 || q.deleted < len(q.msgs)/2 {
		return
	}
	live := q.msgs[:0]
	for _, m := range q.msgs {
		if !m.deleted {
			live = append(live, m)
		}
	}
	clear(q.msgs[len(live):])
	q.msgs, q.deleted = live, 0
	for h, m := range q.handles {
		if m.deleted {
			delete(q.handles, h)
		}
	}
}

// setVisibility changes the visibility timeout of an in-flight message.
func (q *queue) setVisibility(handle string, seconds int, now time.Time) *apiError {
	if seconds < 0 || seconds > MaxVisibility {
		return errInvalid("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and %d.", seconds, MaxVisibility)
	}
	m := q.handles[handle]
	if m == nil {
		return &apiError{400, "ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", fmt.Sprintf("The input receipt handle %q is not a valid receipt handle.", handle)}
	}
	if m.deleted || m.handle != handle || !m.visibleAt.After(now) {
		return &apiError{400, "MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", "The message referred to is not in flight."}
	}
	until := now.Add(time.Duration(seconds) * time.Second)
	if until.Sub(m.received) > MaxVisibility*time.Second {
		return errInvalid("Value %d for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [%d seconds]", seconds, MaxVisibility)
	}
	m.visibleAt = until
	if seconds == 0 {
		q.notify()
	}
	return nil
}

// system returns the system attributes of m that names asks for.
func (q *queue) system(m *message, names []string) map[string]string {
	all := map[string]string{
		"ApproximateReceiveCount":          strconv.Itoa(m.receives),
		"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.firstRecv.UnixMilli(), 10),
		"SentTimestamp":                    strconv.FormatInt(m.sent.UnixMilli(), 10),
		"SenderId":                         AccountID,
	}
	if q.fifo {
		all["MessageGroupId"], all["MessageDeduplicationId"], all["SequenceNumber"] = m.group, m.dedup, m.seq
	}
	out := map[string]string{}
	for _, n := range names {
		if n == "All" {
			return all
		}
		if v, ok := all[n]; ok {
			out[n] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// userAttrs returns the message attributes names asks for: "All", ".*", a name, or
// a prefix "name.*".
func userAttrs(m *message, names []string) map[string]attrValue {
	if len(m.attrs) == 0 || len(names) == 0 {
		return nil
	}
	out := map[string]attrValue{}
	for k, v := range m.attrs {
		for _, n := range names {
			if n == "All" || n == ".*" || n == k || strings.HasSuffix(n, ".*") && strings.HasPrefix(k, strings.TrimSuffix(n, "*")) {
				out[k] = v
				break
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
