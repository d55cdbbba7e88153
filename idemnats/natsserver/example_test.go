package natsserver_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemnats/natsserver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A three-node cluster in the process with a stream replicated on every node:
// the stream's leader is killed, the others elect a new one, and the sink's
// publish rides out the election.
func ExampleStartCluster() {
	dir, err := os.MkdirTemp("", "idemnats-cluster")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	c, err := natsserver.StartCluster(ctx, natsserver.ClusterConfig{Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Shutdown()
	nc, err := nats.Connect(c.ClientURLs()) // every node: the client moves when its node goes
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	st, err := idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Replicas: 3})
	if err != nil {
		log.Fatal(err)
	}
	sink, err := idemnats.NewSink(js, idemnats.SinkConfig{})
	if err != nil {
		log.Fatal(err)
	}
	for c.StreamLeader("ORDERS") < 0 {
		time.Sleep(10 * time.Millisecond)
	}
	c.Kill(c.StreamLeader("ORDERS"))
	msg := idem.Message{ID: "order-1", Topic: "orders.created", Payload: []byte(`{"total":42}`)}
	if err := sink.Publish(ctx, msg); err != nil {
		log.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored:", info.State.Msgs)
	// Output: stored: 1
}
