package idemsqs

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqs/internal/sqsrules"
)

// Message attributes this package sets itself. Neither is delivered as a header.
const (
	// AttrBodyEncoding says how the body carries the payload when it is not the
	// payload itself: "base64" for a payload SQS cannot carry as text (bytes that
	// are not UTF-8, control characters), "empty" for an empty payload (SQS refuses
	// an empty body; the body is then "-").
	AttrBodyEncoding = "Idem-Body-Encoding"
	// HeaderDecodeError is set on a delivery whose message could not be decoded (a
	// body marked base64 that is not): its ID is then empty, so the inbox
	// dead-letters it with this header saying why, and the raw body as payload.
	HeaderDecodeError = "Idem-Decode-Error"
)

// hashedPrefix starts a MessageDeduplicationId or MessageGroupId made from a value
// SQS would refuse (longer than 128 characters, or outside ASCII letters, digits and
// punctuation): its SHA-256, so equal values still share the id.
const hashedPrefix = "idem-sha256-"

// outgoing is one message ready to send.
type outgoing struct {
	m     idem.Message
	entry types.SendMessageBatchRequestEntry
	size  int // body plus attributes, as SQS counts them
}

// encode checks m and maps it to an SQS batch entry: MessageDeduplicationId from the
// ID, MessageGroupId from the OrderingKey (or group), headers as String message
// attributes.
func encode(m idem.Message, cfg SinkConfig) (outgoing, error) {
	if err := m.Validate(); err != nil {
		return outgoing{}, err
	}
	if !strings.HasSuffix(queueName(m.Topic), ".fifo") {
		return outgoing{}, &idem.InputError{Field: "Message.Topic", Reason: fmt.Sprintf("does not name a FIFO queue (got %q)", m.Topic),
			Fix: "publish to a FIFO queue: its name (or URL) ends in .fifo; standard queues have no MessageDeduplicationId"}
	}
	attrs := make(map[string]types.MessageAttributeValue, len(m.Headers)+2)
	size := 0
	put := func(name, value string) {
		attrs[name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(value)}
		size += len(name) + len("String") + len(value)
	}
	for k, v := range m.Headers {
		if err := validHeader(k, v); err != nil {
			return outgoing{}, err
		}
		put(k, v)
	}
	dedup := m.ID
	if sqsrules.GroupOrDedupID(m.ID) != nil {
		if sqsrules.ValidText(m.ID) >= 0 {
			return outgoing{}, &idem.InputError{Field: "Message.ID", Reason: "has a character SQS cannot carry (a Unicode non-character)",
				Fix: "use IDs of printable characters"}
		}
		dedup = hashed(m.ID)
		put(idem.HeaderID, m.ID)
	}
	group := cfg.DefaultGroup
	switch {
	case m.OrderingKey != "":
		group = m.OrderingKey
	case cfg.GroupByID:
		group = dedup
	}
	if sqsrules.GroupOrDedupID(group) != nil {
		group = hashed(group)
	}
	var body string
	switch {
	case len(m.Payload) == 0:
		body = "-"
		put(AttrBodyEncoding, "empty")
	case sqsrules.ValidText(string(m.Payload)) < 0:
		body = string(m.Payload)
	default:
		body = base64.StdEncoding.EncodeToString(m.Payload)
		put(AttrBodyEncoding, "base64")
	}
	if len(attrs) > maxAttributes {
		return outgoing{}, &idem.InputError{Field: "Message.Headers", Reason: fmt.Sprintf("needs %d message attributes, more than SQS's %d", len(attrs), maxAttributes),
			Fix: "send at most 10 headers (8 if the ID or an empty/binary payload needs its own attribute), or move the rest into the payload"}
	}
	size += len(body)
	if size > cfg.MaxMessageSize {
		return outgoing{}, &idem.InputError{Field: "Message.Payload", Reason: fmt.Sprintf("with its attributes is %d bytes, more than the queue's %d (base64 adds a third to a binary payload)", size, cfg.MaxMessageSize),
			Fix: "raise SinkConfig.MaxMessageSize with the queue's MaximumMessageSize (up to 1 MiB), or store the body elsewhere and send a reference"}
	}
	return outgoing{m: m, size: size, entry: types.SendMessageBatchRequestEntry{
		MessageBody: aws.String(body), MessageAttributes: attrs,
		MessageDeduplicationId: aws.String(dedup), MessageGroupId: aws.String(group),
	}}, nil
}

// validHeader refuses a header SQS would refuse as a message attribute, or that
// would be taken for one this package sets.
func validHeader(k, v string) error {
	field := fmt.Sprintf("Message.Headers[%q]", k)
	if err := sqsrules.AttributeName(k); err != nil {
		return &idem.InputError{Field: field, Reason: "is not a valid SQS message attribute name: it " + err.Error(),
			Fix: "use names of letters, digits, '-', '_' and '.', such as \"traceparent\" or \"Content-Type\""}
	}
	switch {
	case strings.EqualFold(k, idem.HeaderID) || strings.EqualFold(k, AttrBodyEncoding) || strings.EqualFold(k, HeaderDecodeError):
		return &idem.InputError{Field: field, Reason: "is reserved by idemsqs", Fix: "rename the header; the sink carries Message.ID itself"}
	case v == "":
		return &idem.InputError{Field: field, Reason: "is empty, and SQS refuses empty attribute values", Fix: "leave the header out, or give it a value"}
	case sqsrules.ValidText(v) >= 0:
		return &idem.InputError{Field: field, Reason: fmt.Sprintf("has a character SQS refuses at byte %d (control characters other than tab and line breaks, bytes that are not UTF-8)", sqsrules.ValidText(v)),
			Fix: "encode the value (for example base64)"}
	}
	return nil
}

func hashed(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hashedPrefix + hex.EncodeToString(sum[:])
}

// decode maps a received message to an idem.Message. The ID is the idem.HeaderID
// attribute if there is one, else the MessageDeduplicationId (on a queue with
// content-based deduplication, the SHA-256 of the body SQS computed). A message
// whose body cannot be decoded is delivered with an empty ID and HeaderDecodeError,
// for the inbox to dead-letter; nothing is dropped.
func decode(queue string, msg types.Message) idem.Message {
	m := idem.Message{Topic: queue, ID: msg.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)],
		OrderingKey: msg.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]}
	body := aws.ToString(msg.Body)
	encoding := ""
	for k, v := range msg.MessageAttributes {
		s := attrString(v)
		switch k {
		case idem.HeaderID:
			m.ID = s
			continue
		case AttrBodyEncoding:
			encoding = s
			continue
		}
		if m.Headers == nil {
			m.Headers = make(map[string]string, len(msg.MessageAttributes))
		}
		m.Headers[k] = s
	}
	var problem string
	switch encoding {
	case "":
		m.Payload = []byte(body)
	case "empty":
		m.Payload = []byte{}
	case "base64":
		p, err := base64.StdEncoding.DecodeString(body)
		if err != nil {
			problem = fmt.Sprintf("the body is marked %s=base64 but is not base64 (%v)", AttrBodyEncoding, err)
		}
		m.Payload = p
	default:
		problem = fmt.Sprintf("unknown %s %.64q", AttrBodyEncoding, encoding)
	}
	if problem != "" {
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		if m.ID != "" {
			problem += "; its id was " + strconv.Quote(m.ID)
		}
		m.Headers[HeaderDecodeError] = problem
		m.ID, m.Payload = "", []byte(body)
	}
	return m
}

// attrString is an attribute's value as a header string: String and Number values
// as they are, Binary ones as their bytes.
func attrString(v types.MessageAttributeValue) string {
	if v.StringValue != nil {
		return *v.StringValue
	}
	return string(v.BinaryValue)
}

// queueName is the name of a queue given by name or URL.
func queueName(q string) string { return q[strings.LastIndexByte(q, '/')+1:] }

func isURL(q string) bool { return strings.HasPrefix(q, "https://") || strings.HasPrefix(q, "http://") }
