package main

import (
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
)

// orderRequest is the body of POST /orders.
type orderRequest struct {
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"` // in cents
}

// orderEvent is the message the outbox publishes for each order.
type orderEvent struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

// order is what GET /orders/{id} answers.
type order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
	// Status is placed (in the outbox or on its way), applied (in the ledger,
	// waiting for its charge), charged, or failed (the payment API refused it).
	Status string `json:"status"`
	Charge string `json:"charge,omitempty"`
	Failed string `json:"failed,omitempty"`
}

// handler is the API: POST /orders behind the atomic idempotency middleware, GET
// /orders/{id} (GETs pass the middleware untouched).
func (a *App) handler() (http.Handler, error) {
	// RequireKey: a POST without an Idempotency-Key is refused with 400 rather
	// than run without protection against the client's retries.
	mw, err := idemhttp.AtomicMiddleware(a.txdb, a.store, idemhttp.Config{RequireKey: true, Logger: a.cfg.Logger})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw(http.HandlerFunc(a.placeOrder)))
	mux.HandleFunc("GET /orders/{id}", a.getOrder)
	return mux, nil
}

// placeOrder writes the order and its event in the middleware's transaction: the
// key's record, the order, the outbox row and the stored response commit together
// or not at all.
func (a *App) placeOrder(w http.ResponseWriter, r *http.Request) {
	var in orderRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	if err := dec.Decode(&in); err != nil || in.Customer == "" || in.Amount <= 0 {
		http.Error(w, `body: want {"customer": "a name", "amount": cents > 0}`, http.StatusBadRequest)
		return
	}
	tx, ok := idemhttp.TxFrom[*sql.Tx](r.Context())
	if !ok {
		http.Error(w, "no transaction: the handler must run behind idemhttp.AtomicMiddleware", http.StatusInternalServerError)
		return
	}
	id := idemkey.NewV7()
	if _, err := tx.ExecContext(r.Context(), "INSERT INTO orders (id, customer, amount) VALUES ($1, $2, $3)", id, in.Customer, in.Amount); err != nil {
		a.cfg.Logger.Error("orders: insert", "err", err)
		http.Error(w, "could not store the order; retry with the same Idempotency-Key", http.StatusServiceUnavailable)
		return
	}
	payload, _ := json.Marshal(orderEvent{OrderID: id, Customer: in.Customer, Amount: in.Amount})
	// The message ID is the order's: the broker, the inbox and the fence all key
	// on it.
	if _, err := a.outbox.EnqueueTx(r.Context(), tx, idem.Message{ID: id, Topic: a.cfg.Subject, Payload: payload}); err != nil {
		a.cfg.Logger.Error("orders: enqueue", "err", err)
		http.Error(w, "could not store the order; retry with the same Idempotency-Key", http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, http.StatusCreated, order{ID: id, Customer: in.Customer, Amount: in.Amount, Status: "placed"})
}

func (a *App) getOrder(w http.ResponseWriter, r *http.Request) {
	var o order
	var applied bool
	var charge, failed sql.NullString
	err := a.db.QueryRowContext(r.Context(), `SELECT o.id, o.customer, o.amount, p.order_id IS NOT NULL, p.charge, p.failed
		FROM orders o LEFT JOIN payments p ON p.order_id = o.id WHERE o.id = $1`, r.PathValue("id")).
		Scan(&o.ID, &o.Customer, &o.Amount, &applied, &charge, &failed)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		http.Error(w, "no such order", http.StatusNotFound)
		return
	case err != nil:
		a.cfg.Logger.Error("orders: read", "err", err)
		http.Error(w, "could not read the order", http.StatusServiceUnavailable)
		return
	}
	o.Status = "placed"
	if applied {
		o.Status = "applied"
	}
	if charge.Valid {
		o.Status, o.Charge = "charged", charge.String
	}
	if failed.Valid {
		o.Status, o.Failed = "failed", failed.String
	}
	writeJSON(w, http.StatusOK, o)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
