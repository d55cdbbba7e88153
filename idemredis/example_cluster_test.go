package idemredis_test

import (
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/idemredis"
)

// A store on Redis Cluster whose writes are on a replica before a call returns:
// Claim, Complete and Renew fail (retryably, wrapping ErrNotReplicated) unless one
// replica acknowledged them, so a failover loses no completion the store reported.
// (No Output: it needs a cluster.)
func ExampleConfig_waitReplicas() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
	})
	defer client.Close()
	store, err := idemredis.New(client, idemredis.Config{
		Prefix:       "billing-idem:",
		WaitReplicas: 1, // each master has one replica
		WaitTimeout:  500 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = store
}
