package verify

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/internal/wait"
	"github.com/idemhq/idem/stream"
)

// Faults of the server → browser boundary.
const (
	// FaultPushKicked: the server drops a watcher's socket (a deploy, a load
	// balancer); the watcher reconnects.
	FaultPushKicked = "push_socket_dropped"
	// FaultPushCut: every watcher's connection is cut in the network.
	FaultPushCut = "push_connection_cut"
)

// BoundaryPush is the row of the WebSocket push to browsers.
const BoundaryPush = "ledger → browser (stream)"

// pushRegions is how many channels the ledger's events are pushed on, one
// watcher each (a region's dashboard).
const pushRegions = 8

func region(customer string) string {
	h := fnv.New32a()
	h.Write([]byte(customer))
	return fmt.Sprintf("region:%d", h.Sum32()%pushRegions)
}

// pusher is the push boundary: a stream server on the flow's database, fed in
// the ledger's transactions, and one watcher per region behind a cutting proxy.
type pusher struct {
	r      *run
	store  *stream.SQLStore[*sql.Tx]
	srv    *stream.Server
	http   *http.Server
	proxy  *chaos.Proxy
	base   string // the watchers' URL, through the proxy
	mu     sync.Mutex
	seen   map[string][]uint64 // region → seqs displayed, in order
	frames map[string]int      // region → event frames received (unsafe watchers)
}

func (r *run) startPush(ctx context.Context) (*pusher, error) {
	store, err := stream.NewSQLStore(ctx, r.txdb, stream.SQLConfig{})
	if err != nil {
		return nil, err
	}
	// The ledger appends in its own transactions, not through the server, so the
	// server polls the store for new events.
	srv, err := stream.NewServer(store, stream.ServerConfig{AllowAnonymous: true, PollInterval: 50 * time.Millisecond, Heartbeat: time.Second, Logger: r.log})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &pusher{r: r, store: store, srv: srv, seen: map[string][]uint64{}, frames: map[string]int{}}
	p.http = &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.http.Serve(ln) }()
	if p.proxy, err = chaos.NewProxy("push", ln.Addr().String()); err != nil {
		p.close()
		return nil, err
	}
	p.base = "http://" + p.proxy.Addr()
	return p, nil
}

func (p *pusher) close() {
	_ = p.srv.Close()
	_ = p.http.Close()
	if p.proxy != nil {
		p.proxy.Close()
	}
}

// appendTx pushes the ledger entry of order to its customer's region, in the
// ledger's transaction: the event exists if and only if the entry does. With
// idem, the order id is the append key (a second apply would append nothing).
func (p *pusher) appendTx(ctx context.Context, tx *sql.Tx, ev orderEvent) error {
	e := stream.Event{Type: "order.applied", ID: ev.OrderID, Data: json.RawMessage(fmt.Sprintf(`{"amount":%d}`, ev.Amount))}
	if !p.r.f.Unsafe {
		e.Key = ev.OrderID
	}
	_, err := p.store.AppendTx(ctx, tx, region(ev.Customer), e)
	return err
}

// watch runs one watcher per region until ctx ends.
func (p *pusher) watch(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range pushRegions {
		ch := fmt.Sprintf("region:%d", i)
		if p.r.f.Unsafe {
			wg.Go(func() { p.watchUnsafe(ctx, ch) })
			continue
		}
		c, err := stream.NewClient(stream.ClientConfig{URL: p.base, Channel: ch, ID: "dashboard",
			MinBackoff: 5 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
			OnEvent: func(e stream.Event) error { p.display(ch, e.Seq); return nil }})
		if err != nil {
			p.r.log.Warn("verify: watcher", "err", err)
			continue
		}
		wg.Go(func() { _ = c.Run(ctx) })
	}
	wg.Wait()
}

var pushFaults = []chaos.Fault{{Kind: FaultPushKicked, Weight: 2}, {Kind: FaultPushCut, Weight: 1}}

// display records one event shown by channel's watcher, and perhaps breaks its
// connection.
func (p *pusher) display(ch string, seq uint64) {
	p.mu.Lock()
	p.seen[ch] = append(p.seen[ch], seq)
	p.mu.Unlock()
	switch p.r.inj.Roll("push "+ch+fmt.Sprint(seq), 1, pushFaults) {
	case FaultPushKicked:
		p.srv.Kick(ch)
	case FaultPushCut:
		p.r.cut(p.proxy, FaultPushCut)
	}
}

// watchUnsafe is a plain WebSocket watcher: live events only, no seq, no resume.
// Each (re)connect starts at the head, so what was pushed meanwhile is missed.
func (p *pusher) watchUnsafe(ctx context.Context, ch string) {
	for ctx.Err() == nil {
		head, err := p.store.Head(ctx, ch)
		if err == nil {
			err = p.liveOnly(ctx, ch, head)
		}
		if ctx.Err() == nil && err != nil {
			wait.Sleep(ctx, 5*time.Millisecond)
		}
	}
}

func (p *pusher) liveOnly(ctx context.Context, ch string, since uint64) error {
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(p.base, "http")+"/stream", nil)
	if err != nil {
		return err
	}
	defer ws.CloseNow()
	hello, _ := json.Marshal(map[string]any{"type": "hello", "channel": ch, "since": since})
	if err := ws.Write(ctx, websocket.MessageText, hello); err != nil {
		return err
	}
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			return err
		}
		var f struct {
			Type  string        `json:"type"`
			Event *stream.Event `json:"event"`
		}
		if json.Unmarshal(data, &f) != nil || f.Type != "event" || f.Event == nil {
			continue
		}
		p.display(ch, f.Event.Seq)
		ack, _ := json.Marshal(map[string]any{"type": "ack", "seq": f.Event.Seq})
		_ = ws.Write(ctx, websocket.MessageText, ack)
	}
}

// pending is how many appended events some watcher has not displayed yet (with
// idem; the unsafe watchers never catch up with what they missed).
func (p *pusher) pending(ctx context.Context) (int, error) {
	if p.r.f.Unsafe {
		return 0, nil
	}
	n := 0
	for i := range pushRegions {
		ch := fmt.Sprintf("region:%d", i)
		head, err := p.store.Head(ctx, ch)
		if err != nil {
			return 0, err
		}
		p.mu.Lock()
		shown := len(p.seen[ch])
		p.mu.Unlock()
		n += max(0, int(head)-shown)
	}
	return n, nil
}

// check builds the push row: every event appended for the ledger is displayed
// by its region's watcher once, in order.
func (p *pusher) check(ctx context.Context, ledgerEntries int) (Row, error) {
	row := Row{Boundary: BoundaryPush}
	appended := 0
	for i := range pushRegions {
		ch := fmt.Sprintf("region:%d", i)
		head, err := p.store.Head(ctx, ch)
		if err != nil {
			return row, err
		}
		appended += int(head)
		p.mu.Lock()
		seqs := append([]uint64(nil), p.seen[ch]...)
		p.mu.Unlock()
		shown := map[uint64]int{}
		for _, s := range seqs {
			shown[s]++
		}
		row.EffectsApplied += len(seqs)
		for s := uint64(1); s <= head; s++ {
			switch n := shown[s]; {
			case n == 0:
				row.Lost++
			case n > 1:
				row.DuplicatedEffects += n - 1
			}
		}
	}
	row.Attempts = appended
	// Every ledger entry has its event (same transaction), no more, no fewer.
	if appended != ledgerEntries {
		diff := ledgerEntries - appended
		if diff > 0 {
			row.Lost += diff
		} else {
			row.DuplicatedEffects += -diff
		}
	}
	return row, nil
}
