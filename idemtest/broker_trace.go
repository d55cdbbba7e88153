package idemtest

import "testing"

// W3C trace context headers, as the outbox stores them and the relay publishes them
// (the examples of the W3C Trace Context recommendation).
const (
	testTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	testTracestate  = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
)

// testBrokerTraceContext: the traceparent and tracestate headers arrive unchanged
// (name and value), so the inbox can continue the producer's trace.
func testBrokerTraceContext(t *testing.T, env BrokerEnv) {
	m := brokerMsg(env, 0)
	m.Headers = map[string]string{"traceparent": testTraceparent, "tracestate": testTracestate, "n": "0"}
	Publish(t, env.Sink, m)
	got := ReceiveN(t, env.NewSource(t), 1)
	d := got[0]
	for k, want := range m.Headers {
		if d.Headers[k] != want {
			t.Errorf("header %q arrived as %q, want %q (headers: %v)", k, d.Headers[k], want, d.Headers)
		}
	}
	Ack(t, d)
}
