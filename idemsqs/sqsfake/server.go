package sqsfake

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// AccountID is the account in the queue URLs the fake hands out.
const AccountID = "000000000000"

// maxRequest bounds a request body: ten 1 MiB messages as JSON, base64 and escapes
// included, with room to spare.
const maxRequest = 32 << 20

// Config configures a Server. The zero value listens on a free loopback port.
type Config struct {
	// Addr is the address to listen on. Empty means "127.0.0.1:0": a free port on
	// loopback only.
	Addr string
	// Now is the fake's clock for visibility timeouts and the dedup window. Nil
	// means time.Now. Waits (long polling) use real time; a test that moves Now
	// forward makes in-flight messages visible and expires dedup ids at once.
	Now func() time.Time
}

// Server is a running fake.
type Server struct {
	ln   net.Listener
	http *http.Server
	now  func() time.Time
	url  string

	mu     sync.Mutex
	queues map[string]*queue // by name
	nextID uint64
	// retriedReceives counts receives answered again for their ReceiveRequestAttemptId.
	retriedReceives int
	closed          chan struct{}
}

// Start listens on cfg.Addr and serves until Close.
func Start(cfg Config) (*Server, error) {
	cfg.Addr = cmp.Or(cfg.Addr, "127.0.0.1:0")
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("sqsfake: listen on %s: %w", cfg.Addr, err)
	}
	s := &Server{ln: ln, now: cfg.Now, url: "http://" + ln.Addr().String(), queues: map[string]*queue{}, closed: make(chan struct{})}
	s.http = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.http.Serve(ln) }()
	return s, nil
}

// URL is the endpoint to give the SDK (sqs.Options.BaseEndpoint): http://host:port.
func (s *Server) URL() string { return s.url }

// QueueURL is the URL of the queue named name (whether or not it exists).
func (s *Server) QueueURL(name string) string { return s.url + "/" + AccountID + "/" + name }

// Close stops serving; long polls in progress return empty.
func (s *Server) Close() error {
	s.mu.Lock()
	select {
	case <-s.closed:
		s.mu.Unlock()
		return nil
	default:
	}
	close(s.closed)
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.http.Shutdown(ctx)
}

// apiError is an SQS error as the JSON protocol sends it.
type apiError struct {
	status int
	code   string // the __type, such as "QueueDoesNotExist"
	query  string // the older query-protocol code, sent in x-amzn-query-error
	msg    string
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

func errInvalid(format string, args ...any) *apiError {
	return &apiError{400, "InvalidParameterValue", "InvalidParameterValue", fmt.Sprintf(format, args...)}
}

func errNoQueue() *apiError {
	return &apiError{400, "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist."}
}

// ServeHTTP answers one SQS call: POST, X-Amz-Target "AmazonSQS.<Op>", a JSON body.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op, ok := strings.CutPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	if r.Method != http.MethodPost || !ok {
		writeError(w, &apiError{400, "InvalidAction", "InvalidAction", "sqsfake speaks the AWS JSON 1.0 protocol: POST with X-Amz-Target: AmazonSQS.<Operation>"})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequest+1))
	if err != nil {
		writeError(w, errInvalid("reading the request: %v", err))
		return
	}
	if len(body) > maxRequest {
		writeError(w, errInvalid("the request is larger than %d bytes", maxRequest))
		return
	}
	out, aerr := s.call(r.Context(), op, body)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	b, err := json.Marshal(out)
	if err != nil {
		writeError(w, &apiError{500, "InternalError", "InternalError", err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	fault := "Sender"
	if e.status >= 500 {
		fault = "Receiver"
	}
	w.Header().Set("x-amzn-query-error", e.query+";"+fault)
	w.WriteHeader(e.status)
	b, _ := json.Marshal(map[string]string{"__type": "com.amazonaws.sqs#" + e.code, "message": e.msg})
	_, _ = w.Write(b)
}

// operation runs one SQS API call on s: it decodes the JSON input and answers.
type operation func(s *Server, ctx context.Context, body []byte) (any, *apiError)

// operations are the calls the fake implements, by their X-Amz-Target name.
var operations = map[string]operation{
	"CreateQueue": op((*Server).createQueue), "GetQueueUrl": op((*Server).getQueueURL), "GetQueueAttributes": op((*Server).getQueueAttributes),
	"DeleteQueue": op((*Server).deleteQueue), "PurgeQueue": op((*Server).purgeQueue),
	"SendMessage": op((*Server).sendMessage), "SendMessageBatch": op((*Server).sendMessageBatch), "ReceiveMessage": receiveOp,
	"DeleteMessage": op((*Server).deleteMessage), "DeleteMessageBatch": op((*Server).deleteMessageBatch),
	"ChangeMessageVisibility": op((*Server).changeVisibility), "ChangeMessageVisibilityBatch": op((*Server).changeVisibilityBatch),
}

// call decodes the input of the operation name, runs it and returns its output.
func (s *Server) call(ctx context.Context, name string, body []byte) (any, *apiError) {
	if run := operations[name]; run != nil {
		return run(s, ctx, body)
	}
	return nil, &apiError{400, "UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", fmt.Sprintf("sqsfake does not implement %s", name)}
}

// op is the operation that decodes an In and runs run on it.
func op[In any](run func(*Server, In) (any, *apiError)) operation {
	return func(s *Server, ctx context.Context, body []byte) (any, *apiError) {
		return decodeRun(body, func(in In) (any, *apiError) { return run(s, in) })
	}
}

// receiveOp is ReceiveMessage, whose long poll ends with the request.
func receiveOp(s *Server, ctx context.Context, body []byte) (any, *apiError) {
	return decodeRun(body, func(in receiveInput) (any, *apiError) { return s.receiveMessage(ctx, in) })
}

func decodeRun[In any](body []byte, run func(In) (any, *apiError)) (any, *apiError) {
	var in In
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, &apiError{400, "SerializationException", "SerializationException", fmt.Sprintf("malformed request body: %v", err)}
	}
	return run(in)
}

// queueByURL finds the queue of a QueueUrl (or a bare queue name, as SQS also
// accepts); s.mu is held.
func (s *Server) queueByURL(u string) (*queue, *apiError) {
	name := u[strings.LastIndexByte(u, '/')+1:]
	q := s.queues[name]
	if q == nil || u == "" {
		return nil, errNoQueue()
	}
	return q, nil
}

// Client returns an SQS client for the fake: region us-east-1, anonymous
// credentials (the fake checks no signature), opts applied last.
func (s *Server) Client(opts ...func(*sqs.Options)) *sqs.Client {
	return sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(s.url), Credentials: aws.AnonymousCredentials{}}, opts...)
}

// Accepted is how many messages the queue named name has accepted since it was
// created, duplicates its dedup dropped not counted; false if there is no such
// queue.
func (s *Server) Accepted(name string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[name]
	if q == nil {
		return 0, false
	}
	return int(q.seq), true
}

// RetriedReceives is how many ReceiveMessage calls were answered with the messages
// an earlier call with the same ReceiveRequestAttemptId took (the SDK retrying a
// call whose answer it did not get).
func (s *Server) RetriedReceives() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retriedReceives
}
