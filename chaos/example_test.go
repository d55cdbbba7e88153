package chaos_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemmem"
)

// An Injector decides faults from its seed, the operation's id and its attempt:
// a second run with the same seed hits the same operations with the same faults,
// so a failure it finds can be replayed.
func ExampleInjector() {
	faults := []chaos.Fault{{Kind: "crash", Weight: 1}, {Kind: "timeout", Weight: 3}}
	run := func(seed int64) (string, *chaos.Injector) {
		in := chaos.NewInjector(seed, 0.5) // about half the operations get a fault
		var hits []string
		for _, id := range []string{"msg-1", "msg-2", "msg-3", "msg-4", "msg-5", "msg-6"} {
			if fault := in.Roll(id, 1, faults); fault != "" {
				hits = append(hits, id+":"+fault)
			}
		}
		return strings.Join(hits, " "), in
	}
	first, in := run(42)
	again, _ := run(42)
	fmt.Println(first)
	fmt.Println(in.Ops(), "ops,", in.Faulted(), "faulted,", in.Counts())
	fmt.Println("same faults with the same seed:", first == again)
	// Output:
	// msg-1:timeout msg-2:timeout msg-3:timeout msg-5:crash
	// 6 ops, 4 faulted, map[crash:1 timeout:3]
	// same faults with the same seed: true
}

// A Clock jump moves a store's time: a lease held by a crashed worker expires
// and the key can be taken over.
func ExampleClock() {
	var clock chaos.Clock
	store, _ := idemmem.New(idemmem.Config{Now: clock.Now})
	ctx := context.Background()
	claim := idem.Claim{Key: idem.Key{Scope: "jobs", ID: "nightly-report"}, Lease: 30 * time.Second}

	first, _ := store.Claim(ctx, claim) // a worker claims the job, then crashes
	second, _ := store.Claim(ctx, claim)
	fmt.Println("worker 1:", first.Outcome, "- worker 2:", second.Outcome)

	fmt.Println("offset:", clock.Jump(time.Minute))
	third, _ := store.Claim(ctx, claim)
	fmt.Println("worker 2:", third.Outcome, "- fences worker 1 out:", third.Token > first.Token)
	// Output:
	// worker 1: acquired - worker 2: in_progress
	// offset: 1m0s
	// worker 2: acquired - fences worker 1 out: true
}

// Transport loses the response of a charge after the server executed it. A
// client through idemhttp.Transport retries with the same Idempotency-Key, and
// the server's middleware answers the retry with the stored response: the card
// is charged once.
func ExampleTransport() {
	store, _ := idemmem.New(idemmem.Config{})
	mw, _ := idemhttp.Middleware(idemhttp.Config{Store: store, RequireKey: true})
	var charges atomic.Int32
	payments := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges.Add(1)
		w.WriteHeader(http.StatusCreated)
	})))
	defer payments.Close()

	injector := chaos.NewInjector(1, 1) // every request is hit ...
	lossy := &chaos.Transport{Injector: injector, Faults: []chaos.Fault{
		{Kind: chaos.FaultDropResponse, Weight: 1, Max: 1}, // ... until one response was dropped
	}}
	client := &http.Client{Transport: &idemhttp.Transport{Base: lossy, MinBackoff: time.Millisecond}}

	resp, err := client.Post(payments.URL+"/charges", "application/json", strings.NewReader(`{"amount":4200}`))
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.Status, "attempts:", resp.Header.Get(idemhttp.HeaderAttempts))
	fmt.Println("charges:", charges.Load(), "faults:", injector.Counts())
	// Output:
	// 201 Created attempts: 2
	// charges: 1 faults: map[http_response_dropped:1]
}
