package idemsqs

import (
	"bytes"
	"errors"
	"maps"
	"testing"

	"github.com/idemhq/idem/idemsqs/internal/sqsrules"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemhq/idem"
)

// FuzzMessage checks the mapping between idem messages and SQS messages: a message
// the sink accepts comes back from the source unchanged, with a dedup id and group
// id SQS accepts; a message it refuses is an input error; and whatever another
// producer sends (any attributes, any body, a bogus encoding) never panics the
// source, and yields either a message or an empty ID saying why.
func FuzzMessage(f *testing.F) {
	f.Add("order-1", "orders.fifo", "ord-1", "traceparent", "00-ab-cd-01", []byte(`{"n":1}`), "")
	f.Add("naïve id", "x.fifo", "", "Idem-Msg-Id", "spoof", []byte{0, 0xff}, "base64")
	f.Add("", "q", "k", "", "", []byte(nil), "empty")
	f.Add("id", "q.fifo", "k", "a..b", "v", []byte("\x01"), "zstd")
	f.Fuzz(func(t *testing.T, id, topic, key, hk, hv string, payload []byte, encoding string) {
		m := idem.Message{ID: id, Topic: topic, OrderingKey: key, Payload: payload, Headers: map[string]string{hk: hv}}
		out, err := encode(m, SinkConfig{DefaultGroup: DefaultGroup, MaxMessageSize: MaxMessageSize, GroupByID: len(payload)%2 == 0})
		if err != nil {
			if !errors.Is(err, idem.ErrInvalid) {
				t.Fatalf("encode(%+v) = %v, want an *idem.InputError", m, err)
			}
		} else {
			e := out.entry
			if sqsrules.GroupOrDedupID(*e.MessageDeduplicationId) != nil || sqsrules.GroupOrDedupID(*e.MessageGroupId) != nil ||
				sqsrules.ValidText(*e.MessageBody) >= 0 || *e.MessageBody == "" || len(e.MessageAttributes) > maxAttributes {
				t.Fatalf("encode(%+v) made an entry SQS refuses: %+v", m, e)
			}
			got := decode(queueName(topic), types.Message{Body: e.MessageBody, MessageAttributes: e.MessageAttributes,
				Attributes: map[string]string{"MessageDeduplicationId": *e.MessageDeduplicationId, "MessageGroupId": *e.MessageGroupId}})
			if got.ID != m.ID || !bytes.Equal(got.Payload, m.Payload) || !maps.Equal(got.Headers, m.Headers) {
				t.Fatalf("round trip changed the message:\n sent %+v\n  got %+v", m, got)
			}
		}

		// Another producer: any attribute, any encoding marker, any body.
		attrs := map[string]types.MessageAttributeValue{hk: {DataType: aws.String("Binary"), BinaryValue: []byte(hv)}}
		if encoding != "" {
			attrs[AttrBodyEncoding] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(encoding)}
		}
		got := decode("q", types.Message{Body: aws.String(string(payload)), MessageAttributes: attrs,
			Attributes: map[string]string{"MessageDeduplicationId": id}})
		if problem, bad := got.Headers[HeaderDecodeError]; bad && (got.ID != "" || problem == "") {
			t.Fatalf("an undecodable message kept ID %q (problem %q)", got.ID, problem)
		}
		if err := got.Validate(); err != nil && !errors.Is(err, idem.ErrInvalid) {
			t.Fatalf("Validate = %v, want nil or an *idem.InputError", err)
		}
	})
}
