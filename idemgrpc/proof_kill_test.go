package idemgrpc_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/grpctest"
	"github.com/idemhq/idem/internal/orderspb"
	"github.com/idemhq/idem/internal/testsvc"
)

// The environment of the server process of TestProofKilledServer.
const (
	proofChildTarget = "IDEM_GRPC_PROOF_CHILD_TARGET" // the proofTarget's name
	proofChildLoc    = "IDEM_GRPC_PROOF_CHILD_LOC"    // where its store is
	proofChildAddr   = "IDEM_GRPC_PROOF_CHILD_ADDR"   // where to listen
)

// proofKillLease is the lease of the killed server's claims: how long the new
// server waits before it may run the call again. The killed server renews it
// while it lives, and the test reads the claim right after the kill: a third of
// it (a renewal's time budget) must be ample for the slowest store.
const proofKillLease = 1500 * time.Millisecond

// A server killed (SIGKILL) while its handler runs: the server is a child
// process on a store that outlives it; once the call has reached its handler
// (the child says so), the child is killed, and a new server on the same store
// and address answers the retry that grpc-go's retry policy sends. In plain mode
// the killed server's claim stays in progress until its lease runs out (the new
// server waits for it: Config.Wait), then the call runs again, once; in atomic
// mode the killed transaction is rolled back by the database, leaving no row and
// no claim (a claim left behind would hold the key for the retention, and the new
// server would give up after Config.Wait), and the call runs at once, once: one
// row. The client gets the new server's order either way.
//
// The memory store is skipped: it lives and dies with its process, so there is
// no store left for a new server to share.
func TestProofKilledServer(t *testing.T) {
	t.Parallel()
	proofForEach(t, proofBoth, func(t *testing.T, tg proofTarget, loc string, env *proofEnv) {
		if loc == "" {
			t.Skip("the memory store dies with the killed process: no other process can share it")
		}
		addr := testsvc.ClosedAddr(t)
		child := proofStartChild(t, tg.name, loc, addr)
		proofAwaitLine(t, child, "serving")

		client := proofDial(t, addr, grpctest.RetryServiceConfig, proofKeys(t))
		type answer struct {
			o   *orderspb.Order
			err error
		}
		done := make(chan answer, 1)
		key := idemkey.NewV7()
		go func() {
			ctx := metadata.AppendToOutgoingContext(context.Background(), idemgrpc.MetadataKey, key)
			o, err := client.PlaceOrder(ctx, &orderspb.PlaceOrderRequest{Customer: "killed", Amount: 11})
			done <- answer{o, err}
		}()
		proofAwaitLine(t, child, "reached killed")
		child.kill(t)
		if insp, ok := env.store.(idem.Inspector); ok {
			// The dead server's claim, which only its lease will end.
			rec, err := insp.Inspect(context.Background(), idem.Key{Scope: "anonymous", ID: key})
			if err != nil || rec.State != idem.StateInProgress {
				t.Fatalf("after the kill the store holds %+v (%v), want the key in progress", rec, err)
			}
		}

		// The new server, on the same address and store.
		var ln net.Listener
		testsvc.Eventually(t, time.Minute, "the killed server's address to be free", func() bool {
			var err error
			ln, err = net.Listen("tcp", addr)
			return err == nil
		})
		orders := &grpctest.Orders{}
		mw := proofMust(env.interceptor(idemgrpc.Config{RequireKey: true, Lease: proofKillLease, Wait: time.Minute}))(t)
		orders.Effect = env.effect
		srv := grpc.NewServer(grpc.ChainUnaryInterceptor(mw))
		orderspb.RegisterOrdersServer(srv, orders)
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(srv.Stop)

		var a answer
		select {
		case a = <-done:
		case <-time.After(2 * time.Minute): // only ends a test that would hang
			t.Fatal("the call got no answer from the new server")
		}
		if a.err != nil {
			t.Fatalf("the retry after the kill: %v", a.err)
		}
		proofPlacedOnce(t, env, orders, "killed", a.o)
		if n := orders.Executions(); n != 1 || a.o.GetExecution() != 1 {
			t.Fatalf("the new server ran the handler %d times (the order says execution %d), want 1", n, a.o.GetExecution())
		}
	})
}

// TestProofChildServer is the server process of TestProofKilledServer: it
// serves the order service on the given address and store, prints "serving",
// and blocks every execution after printing "reached <customer>", until it is
// killed.
func TestProofChildServer(t *testing.T) {
	name := os.Getenv(proofChildTarget)
	if name == "" {
		t.Skip("the server process of TestProofKilledServer")
	}
	var env *proofEnv
	for _, tg := range proofTargets {
		if tg.name == name {
			env = tg.open(t, os.Getenv(proofChildLoc))
		}
	}
	if env == nil {
		t.Fatalf("no target %q", name)
	}
	orders := &grpctest.Orders{Before: func(_ context.Context, req *orderspb.PlaceOrderRequest) {
		fmt.Printf("proof-child: reached %s\n", req.GetCustomer())
		select {} // until killed
	}}
	mw := proofMust(env.interceptor(idemgrpc.Config{RequireKey: true, Lease: proofKillLease}))(t)
	orders.Effect = env.effect
	ln := proofMust(net.Listen("tcp", os.Getenv(proofChildAddr)))(t)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(mw))
	orderspb.RegisterOrdersServer(srv, orders)
	fmt.Println("proof-child: serving")
	if err := srv.Serve(ln); err != nil {
		t.Fatal(err)
	}
}

// proofChild is the server process of a target, and the lines it prints.
type proofChild struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *testsvc.Buffer
}

// proofStartChild starts TestProofChildServer in a child process (this test
// binary again) serving target on the store at loc and on addr; it is killed
// when t ends, if it is still running.
func proofStartChild(t *testing.T, target, loc, addr string) *proofChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestProofChildServer$", "-test.count=1")
	cmd.Env = append(os.Environ(), proofChildTarget+"="+target, proofChildLoc+"="+loc, proofChildAddr+"="+addr)
	c := &proofChild{cmd: cmd, lines: make(chan string, 16), stderr: &testsvc.Buffer{}}
	cmd.Stderr = c.stderr
	out := proofMust(cmd.StdoutPipe())(t)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.kill(t) })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "proof-child: "); ok {
				c.lines <- line
			}
		}
		close(c.lines)
	}()
	return c
}

// kill sends SIGKILL to the child and waits for it to end.
func (c *proofChild) kill(t *testing.T) {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}

// proofAwaitLine waits for the child to print want, failing t if it prints
// something else or ends first.
func proofAwaitLine(t *testing.T, c *proofChild, want string) {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok || line != want {
			t.Fatalf("the server process said %q (ended: %v), want %q; its stderr:\n%s", line, !ok, want, c.stderr.String())
		}
	case <-time.After(2 * time.Minute): // only ends a test that would hang
		t.Fatalf("the server process did not say %q; its stderr:\n%s", want, c.stderr.String())
	}
}
