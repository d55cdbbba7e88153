package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/idemamqp"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/internal/testsvc"
)

// The relay delivers to a webhook, signed: the receiver verifies every request.
func TestRelaySQLiteToWebhook(t *testing.T) {
	t.Parallel()
	secret := "a webhook secret of 32 bytes or more"
	var mu sync.Mutex
	var keys []string
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := idemhttp.VerifyWebhook([]byte(secret), r, body, time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
	}))
	t.Cleanup(receiver.Close)
	path, _, enqueue := sqliteOutbox(t, "orders.created")
	enqueue("w1", "w2")
	r := startRelay(t, "--db", "sqlite:"+path, "--sink", receiver.URL+"/hooks", "--webhook-secret", secret, "--poll", "50ms")
	enqueue("w3")
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		got := strings.Join(keys, ",")
		mu.Unlock()
		if got == "w1,w2,w3" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("receiver verified %q, want w1,w2,w3\n%s", got, r.stderr)
		}
	}
	r.checkHTTP(t, 3)
	r.stop(t)
}

// The relay appends to Redis Streams, one stream per topic, with the duplicate
// window on by default (--redis-dedup): each entry's marker lives up to 2 minutes.
func TestRelaySQLiteToRedis(t *testing.T) {
	t.Parallel()
	topic := testsvc.RedisPrefix(t) + "orders"
	client := redis.NewClient(&redis.Options{Addr: testsvc.RedisAddr()})
	markers := make([]string, 2)
	for i, id := range []string{"r1", "r2"} {
		markers[i], _ = idemredis.DedupKey(topic, id)
	}
	t.Cleanup(func() {
		client.Del(context.Background(), append(markers, topic)...)
		client.Close()
	})
	path, _, enqueue := sqliteOutbox(t, topic)
	enqueue("r1", "r2")
	r := startRelay(t, "--db", "sqlite:"+path, "--sink", "redis://"+testsvc.RedisAddr(), "--poll", "50ms")
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		entries, err := client.XRange(context.Background(), topic, "-", "+").Result()
		if err == nil && len(entries) == 2 {
			if entries[0].Values["id"] != "r1" || entries[1].Values["id"] != "r2" {
				t.Fatalf("stream holds %v, want r1 then r2", entries)
			}
			for _, k := range markers {
				if ttl := client.PTTL(context.Background(), k).Val(); ttl <= 0 || ttl > open.DefaultRedisDedup {
					t.Errorf("marker %s: TTL %v, want the default window's (0, %v]", k, ttl, open.DefaultRedisDedup)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s: %v entries, err %v\n%s", topic, len(entries), err, r.stderr)
		}
	}
	r.checkHTTP(t, 2)
	r.stop(t)
}

func amqpURL() string { return cli.EnvOr("IDEM_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/") }

// The relay publishes to RabbitMQ's default exchange: the topic names the queue.
func TestRelaySQLiteToRabbitMQ(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(amqpURL())
	if err != nil {
		t.Fatal(err)
	}
	testsvc.Reach(t, "rabbitmq", u.Host)
	conn, err := amqp.Dial(amqpURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	queue := testsvc.UniqueName("relaytest-")
	if err := idemamqp.EnsureQueue(context.Background(), conn, queue, idemamqp.QueueConfig{}); err != nil {
		t.Fatalf("EnsureQueue: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(queue, false, false, false)
		ch.Close()
	})
	path, _, enqueue := sqliteOutbox(t, queue)
	enqueue("q1", "q2")
	r := startRelay(t, "--db", "sqlite:"+path, "--sink", amqpURL(), "--poll", "50ms")
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err == nil && q.Messages == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s: %+v, err %v\n%s", queue, q, err, r.stderr)
		}
	}
	for _, want := range []string{"q1", "q2"} {
		d, ok, err := ch.Get(queue, true)
		if err != nil || !ok || d.MessageId != want {
			t.Fatalf("Get: message-id %q, ok %v, err %v; want %q", d.MessageId, ok, err, want)
		}
	}
	r.checkHTTP(t, 2)
	r.stop(t)
}

// The relay produces to Kafka (an in-process kfake cluster), the ID in Idem-Msg-Id.
func TestRelaySQLiteToKafka(t *testing.T) {
	t.Parallel()
	topic := testsvc.UniqueName("relaytest-")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	path, _, enqueue := sqliteOutbox(t, topic)
	enqueue("k1", "k2")
	r := startRelay(t, "--db", "sqlite:"+path, "--sink", "kafka://"+strings.Join(c.ListenAddrs(), ","), "--poll", "50ms")

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var ids []string
	for len(ids) < 2 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
			for _, h := range rec.Headers {
				if h.Key == idem.HeaderID {
					ids = append(ids, string(h.Value))
				}
			}
		})
	}
	if strings.Join(ids, ",") != "k1,k2" {
		t.Fatalf("topic holds %v, want k1 then k2\n%s", ids, r.stderr)
	}
	r.checkHTTP(t, 2)
	r.stop(t)
}
