package idempubsub_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempubsub"
	"github.com/idemhq/idem/idemtest"
)

// msgID is the server's message ID of a delivery ("message m3").
func msgID(d idem.Delivery) string { return strings.TrimPrefix(d.Position, "message ") }

// oneSecondSub makes a topic and a subscription on it with a 1 s ack deadline:
// EnsureSubscription refuses a deadline below Pub/Sub's 10 s; TestMain let the
// fake accept 1 s.
func (f fake) oneSecondSub(t *testing.T) (topic, sub string) {
	t.Helper()
	ctx := context.Background()
	topic, sub = unique("topic"), unique("sub")
	if err := idempubsub.EnsureTopic(ctx, f.client, topic); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: "projects/" + testProject + "/subscriptions/" + sub, Topic: "projects/" + testProject + "/topics/" + topic, AckDeadlineSeconds: 1}); err != nil {
		t.Fatal(err)
	}
	return topic, sub
}

// TestRenewsWhileHandlerRuns: on a subscription whose ack deadline is 1 s, a
// delivery held unsettled for 4 s is not handed to a competing source, because the
// source renews its deadline (the fake records the renewals); once acked, it does
// not come back. Without the renewal the competitor would get it after 1 s.
func TestRenewsWhileHandlerRuns(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	topic, sub := f.oneSecondSub(t)
	idemtest.Publish(t, f.sink(t), idem.Message{ID: "slow", Topic: topic, Payload: []byte("x")})
	holder := f.source(t, idempubsub.SourceConfig{Subscription: sub})
	d := idemtest.ReceiveN(t, holder, 1)[0]

	rival := f.source(t, idempubsub.SourceConfig{Subscription: sub})
	if got := idemtest.Receive(t, rival, 1, 4*time.Second); len(got) != 0 {
		t.Fatalf("a delivery held by a running handler went to a competing source after the 1s deadline: %s", got[0].ID)
	}
	var renewed int
	for _, m := range f.srv.Message(msgID(d)).Modacks {
		if m.AckDeadline == int32(testLease/time.Second) {
			renewed++
		}
	}
	if renewed == 0 {
		t.Fatalf("no renewal to the %v lease recorded: %+v", testLease, f.srv.Message(msgID(d)).Modacks)
	}
	idemtest.Ack(t, d)
	if got := idemtest.Receive(t, rival, 1, 3*time.Second); len(got) != 0 {
		t.Fatalf("acked message %s delivered again", got[0].ID)
	}
	if acks := f.srv.Message(msgID(d)).Acks; acks != 1 {
		t.Fatalf("the fake recorded %d acks, want 1", acks)
	}
}

// A source whose renewals are paused (a process stopped past its lease) loses its
// delivery to a competing source once the deadline runs out, where
// TestRenewsWhileHandlerRuns's holder keeps it.
func TestPausedRenewalsLoseTheDelivery(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	topic, sub := f.oneSecondSub(t)
	idemtest.Publish(t, f.sink(t), idem.Message{ID: "paused", Topic: topic, Payload: []byte("x")})
	holder := f.source(t, idempubsub.SourceConfig{Subscription: sub})
	resume := holder.PauseRenewals()
	defer resume()
	d := idemtest.ReceiveN(t, holder, 1)[0]
	rival := f.source(t, idempubsub.SourceConfig{Subscription: sub})
	again := idemtest.ReceiveN(t, rival, 1)[0]
	if again.ID != d.ID {
		t.Fatalf("the rival got %s, want the paused source's %s", again.ID, d.ID)
	}
	idemtest.Ack(t, again)
}

// TestNakDelay: Nak sets the ack deadline to the delay in whole seconds, rounded
// up and capped at 600 s (the fake records it), and the message comes back.
func TestNakDelay(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	topic, sub := f.topicSub(t, idempubsub.SubscriptionConfig{})
	src := f.source(t, idempubsub.SourceConfig{Subscription: sub})
	for _, c := range []struct {
		delay time.Duration
		want  int32
	}{{0, 0}, {-time.Second, 0}, {10 * time.Millisecond, 1}, {1500 * time.Millisecond, 2}, {time.Hour, 600}} {
		id := fmt.Sprintf("nak-%v", c.delay)
		idemtest.Publish(t, f.sink(t), idem.Message{ID: id, Topic: topic, Payload: []byte("x")})
		d := idemtest.ReceiveN(t, src, 1)[0]
		if err := d.Settler.Nak(context.Background(), c.delay); err != nil {
			t.Fatalf("Nak(%v): %v", c.delay, err)
		}
		mods := f.srv.Message(msgID(d)).Modacks
		if len(mods) == 0 || mods[len(mods)-1].AckDeadline != c.want {
			t.Fatalf("Nak(%v) sent modacks %+v, want a last deadline of %ds", c.delay, mods, c.want)
		}
		if err := d.Settler.Ack(context.Background()); !errors.Is(err, idempubsub.ErrSettled) {
			t.Fatalf("Ack after Nak = %v, want ErrSettled", err)
		}
		if c.want <= 2 {
			again := idemtest.ReceiveN(t, src, 1)[0]
			if again.ID != id {
				t.Fatalf("after Nak(%v), received %s, want %s again", c.delay, again.ID, id)
			}
			idemtest.Ack(t, again)
		}
	}
}

// ackReactor answers Acknowledge requests as an exactly-once subscription does when
// an ack fails: an error whose ErrorInfo maps each ack ID to a reason. It answers
// with the next of reasons, then lets the fake handle the request.
type ackReactor struct {
	mu      sync.Mutex
	reasons []string
	calls   int
}

func (r *ackReactor) React(req any) (bool, any, error) {
	ar, ok := req.(*pubsubpb.AcknowledgeRequest)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if !ok || len(r.reasons) == 0 {
		return false, nil, nil
	}
	reason := r.reasons[0]
	r.reasons = r.reasons[1:]
	md := make(map[string]string, len(ar.AckIds))
	for _, id := range ar.AckIds {
		md[id] = reason
	}
	st, err := status.New(codes.InvalidArgument, "Some acknowledgement ids in the request were invalid.").WithDetails(
		&errdetails.ErrorInfo{Reason: "EXACTLY_ONCE_ACKID_FAILURE", Domain: "pubsub.googleapis.com", Metadata: md})
	if err != nil {
		panic(err)
	}
	return true, nil, st.Err()
}

func (r *ackReactor) set(reasons ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reasons, r.calls = reasons, 0
}

// TestExactlyOnceAckResults: on an exactly-once subscription Pub/Sub answers a
// failed ack per ack ID. pstest never fails an ack itself, so a reactor answers as
// the service documents: transient failures are retried until the ack takes; an
// expired ack ID is ErrInvalidAckID (final, not retried); another permanent reason
// is a backend error naming it.
func TestExactlyOnceAckResults(t *testing.T) {
	t.Parallel()
	r := &ackReactor{}
	f := newFake(t, pstest.ServerReactorOption{FuncName: "Acknowledge", Reactor: r})
	topic, sub := f.topicSub(t, idempubsub.SubscriptionConfig{ExactlyOnce: true})
	src := f.source(t, idempubsub.SourceConfig{Subscription: sub})
	if !src.ExactlyOnce() {
		t.Fatal("the source does not see the subscription's exactly-once delivery")
	}
	receive := func(id string) idem.Delivery {
		idemtest.Publish(t, f.sink(t), idem.Message{ID: id, Topic: topic, Payload: []byte("x")})
		return idemtest.ReceiveN(t, src, 1)[0]
	}

	d := receive("transient")
	r.set("TRANSIENT_FAILURE_UNORDERED_ACK_ID", "TRANSIENT_FAILURE_UNORDERED_ACK_ID")
	if err := d.Settler.Ack(context.Background()); err != nil {
		t.Fatalf("Ack after two transient failures = %v, want nil", err)
	}
	if r.calls != 3 || f.srv.Message(msgID(d)).Acks != 1 {
		t.Fatalf("%d Acknowledge calls, %d acks recorded; want 3 calls and the third one recorded", r.calls, f.srv.Message(msgID(d)).Acks)
	}

	d = receive("expired")
	r.set("PERMANENT_FAILURE_INVALID_ACK_ID")
	err := d.Settler.Ack(context.Background())
	if !errors.Is(err, idempubsub.ErrInvalidAckID) || idem.IsRetryable(err) || r.calls != 1 {
		t.Fatalf("Ack of an expired ack ID = %v (retryable %v, %d calls); want ErrInvalidAckID, final, one call", err, idem.IsRetryable(err), r.calls)
	}
	if f.srv.Message(msgID(d)).Acks != 0 {
		t.Fatal("the refused ack was recorded")
	}

	d = receive("other")
	r.set("PERMANENT_FAILURE_OTHER")
	var be *idem.BackendError
	if err := d.Settler.Ack(context.Background()); !errors.As(err, &be) || !strings.Contains(err.Error(), "PERMANENT_FAILURE_OTHER") {
		t.Fatalf("Ack refused for another reason = %v, want a BackendError naming it", err)
	}
}

// TestUnreadableSubscription: without permission to read the subscription
// (roles/pubsub.subscriber lacks pubsub.subscriptions.get), the source still
// consumes, promises only DelayedNak, and names the subscription as the topic.
func TestUnreadableSubscription(t *testing.T) {
	t.Parallel()
	f := newFake(t, pstest.WithErrorInjection("GetSubscription", codes.PermissionDenied, "caller lacks pubsub.subscriptions.get"))
	topic, sub := f.topicSub(t, idempubsub.SubscriptionConfig{Ordering: true})
	src := f.source(t, idempubsub.SourceConfig{Subscription: sub})
	if got := src.Features(); got != (idem.Features{DelayedNak: true}) {
		t.Fatalf("Features = %+v, want only DelayedNak", got)
	}
	idemtest.Publish(t, f.sink(t), idem.Message{ID: "a", Topic: topic, Payload: []byte("x")})
	d := idemtest.ReceiveN(t, src, 1)[0]
	if d.ID != "a" || d.Topic != sub {
		t.Fatalf("delivery %q on %q, want a on %q", d.ID, d.Topic, sub)
	}
	idemtest.Ack(t, d)
}

// TestMissingSubscription: NewSource names the subscription and the fix.
func TestMissingSubscription(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	_, err := idempubsub.NewSource(context.Background(), f.client, idempubsub.SourceConfig{Subscription: "nowhere"})
	if err == nil || !strings.Contains(err.Error(), "EnsureSubscription") || !strings.Contains(err.Error(), "nowhere") {
		t.Fatalf("NewSource on a missing subscription = %v, want an error naming it and EnsureSubscription", err)
	}
}

// TestOrdering: on an ordered subscription, messages of one ordering key arrive
// in publish order, a Nak'ed one before the next of its key, while keys interleave.
func TestOrdering(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	topic, sub := f.topicSub(t, idempubsub.SubscriptionConfig{Ordering: true})
	var msgs []idem.Message
	for i := range 30 {
		msgs = append(msgs, idem.Message{ID: fmt.Sprintf("%s-%02d", "ab"[i%2:i%2+1], i), Topic: topic,
			OrderingKey: "ab"[i%2 : i%2+1], Payload: []byte("x")})
	}
	idemtest.Publish(t, f.sink(t), msgs...)
	src := f.source(t, idempubsub.SourceConfig{Subscription: sub})
	if !src.Features().OrderedPerKey {
		t.Fatal("an ordered subscription's source does not promise OrderedPerKey")
	}
	got := map[string][]string{}
	naked := false
	for n := 0; n < len(msgs); {
		for _, d := range idemtest.ReceiveN(t, src, 1) {
			if d.ID == "a-10" && !naked {
				naked = true
				if err := d.Settler.Nak(context.Background(), 0); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got[d.OrderingKey] = append(got[d.OrderingKey], d.ID)
			idemtest.Ack(t, d)
			n++
		}
	}
	for key, ids := range got {
		for i := 1; i < len(ids); i++ {
			if ids[i-1] >= ids[i] {
				t.Fatalf("key %s delivered out of order: %v", key, ids)
			}
		}
		if len(ids) != 15 {
			t.Fatalf("key %s: %d messages, want 15: %v", key, len(ids), ids)
		}
	}
}

// TestCloseGivesBackPulled: a message pulled after its Receive gave up is kept for
// the next Receive, and Close hands it back at once (a zero deadline) rather than
// leaving it to time out.
func TestCloseGivesBackPulled(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	topic, sub := f.topicSub(t, idempubsub.SubscriptionConfig{})
	src, err := idempubsub.NewSource(context.Background(), f.client, idempubsub.SourceConfig{Subscription: sub, Lease: testLease})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if ds, err := src.Receive(ctx, 1); len(ds) != 0 || err == nil { // leaves its Pull running
		t.Fatalf("Receive on an empty subscription = %d deliveries, %v", len(ds), err)
	}
	cancel()
	idemtest.Publish(t, f.sink(t), idem.Message{ID: "late", Topic: topic, Payload: []byte("x")})
	var m *pstest.Message
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// The server counts the delivery before the Pull's answer reaches the
		// source: a Close in between would cancel that answer. Wait for the source.
		if ms := f.srv.Messages(); len(ms) == 1 && ms[0].Deliveries == 1 && src.Buffered() == 1 {
			m = ms[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Pull left running never took the message")
		}
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	mods := f.srv.Message(m.ID).Modacks
	if len(mods) == 0 || mods[len(mods)-1].AckDeadline != 0 {
		t.Fatalf("Close sent modacks %+v, want a zero deadline for the pulled message", mods)
	}
	again := idemtest.ReceiveN(t, f.source(t, idempubsub.SourceConfig{Subscription: sub}), 1)
	if again[0].ID != "late" {
		t.Fatalf("received %s, want late", again[0].ID)
	}
	idemtest.Ack(t, again...)
}

// gate holds the first Acknowledge request until released, and counts them all.
type gate struct {
	mu      sync.Mutex
	calls   int
	release chan struct{}
}

func (g *gate) React(any) (bool, any, error) {
	g.mu.Lock()
	g.calls++
	first := g.calls == 1
	g.mu.Unlock()
	if first {
		<-g.release
	}
	return false, nil, nil
}

// TestConcurrentAcksShareRequests: acks made while an Acknowledge request is on its
// way go together in the next one, and every one of them takes.
func TestConcurrentAcksShareRequests(t *testing.T) {
	t.Parallel()
	g := &gate{release: make(chan struct{})}
	f := newFake(t, pstest.ServerReactorOption{FuncName: "Acknowledge", Reactor: g})
	topic, sub := f.topicSub(t, idempubsub.SubscriptionConfig{})
	var msgs []idem.Message
	for i := range 50 {
		msgs = append(msgs, idem.Message{ID: fmt.Sprint("c-", i), Topic: topic, Payload: []byte("x")})
	}
	idemtest.Publish(t, f.sink(t), msgs...)
	ds := idemtest.ReceiveN(t, f.source(t, idempubsub.SourceConfig{Subscription: sub}), 50)
	errs := make(chan error, len(ds))
	for _, d := range ds {
		go func() { errs <- d.Settler.Ack(context.Background()) }()
	}
	time.Sleep(300 * time.Millisecond) // the first request is held; the others queue behind it
	close(g.release)
	for range ds {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	g.mu.Lock()
	calls := g.calls
	g.mu.Unlock()
	if calls >= len(ds) {
		t.Fatalf("%d Acknowledge requests for %d concurrent acks, want them shared", calls, len(ds))
	}
	for _, d := range ds {
		if acks := f.srv.Message(msgID(d)).Acks; acks != 1 {
			t.Fatalf("message %s: %d acks recorded, want 1", d.ID, acks)
		}
	}
	t.Logf("%d concurrent acks in %d requests", len(ds), calls)
}
