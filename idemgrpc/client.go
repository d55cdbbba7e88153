package idemgrpc

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
)

// ClientConfig configures UnaryClientInterceptor. The zero value keys every unary
// call.
type ClientConfig struct {
	// Methods lists the full method names ("/pkg.Service/Method") that get a key.
	// Default nil: every unary call (a server skips the methods it does not
	// guard, so a key on a read costs a few bytes).
	Methods []string
	// RequestField, if set, names the request message's string field that carries
	// the key (AIP-155 request_id): when it is empty, the call is sent with a copy
	// of the request whose field holds the key (the caller's message is not
	// changed); when it is set, it is the key. The key is sent in the metadata
	// either way.
	RequestField protoreflect.Name
	// NewKey makes the key of a call with no lineage and no key of its own.
	// Default idemkey.NewV7: a UUIDv7, which carries its time, so a server can
	// refuse a retry that comes after it forgot the key (Config.MaxKeyAge).
	NewKey func() string
}

// UnaryClientInterceptor returns the client interceptor that gives each logical
// call one idempotency key, sent as the idempotency-key metadata. It runs above
// grpc-go's retries (a ClientConn's service config retryPolicy resends the same
// call, metadata and all) and above any hedging interceptor chained after it
// (grpc-go implements no hedgingPolicy), so every retry and every hedged copy of
// one call carries the same key, and a server behind UnaryServerInterceptor runs
// it once.
//
// The key is, in order: the one the call already carries (set with
// metadata.AppendToOutgoingContext, or in ClientConfig.RequestField); else,
// when the context carries a key lineage (idem.WithKey; the HTTP middleware, the
// inbox and effect.Fence set one for their handlers), idemkey.Derive(lineage,
// full method name), so a handler run again for the same request or message
// makes the same downstream call with the same key; else ClientConfig.NewKey.
// A call that must happen twice within one lineage needs its own lineage:
// idem.WithKey(ctx, idemkey.Derive(key, "refund-2")).
func UnaryClientInterceptor(cfg ClientConfig) (grpc.UnaryClientInterceptor, error) {
	var methods map[string]bool
	if cfg.Methods != nil {
		methods = make(map[string]bool, len(cfg.Methods))
		for _, m := range cfg.Methods {
			if !strings.HasPrefix(m, "/") || strings.Count(m, "/") != 2 {
				return nil, &idem.InputError{Field: "ClientConfig.Methods", Reason: fmt.Sprintf("holds %q, which is not a full method name", m),
					Fix: `write methods as grpc spells them: "/package.Service/Method"`}
			}
			methods[m] = true
		}
	}
	if cfg.RequestField != "" && !cfg.RequestField.IsValid() {
		return nil, &idem.InputError{Field: "ClientConfig.RequestField", Reason: fmt.Sprintf("is %q, not a protobuf field name", cfg.RequestField),
			Fix: "name the request message's top-level string field, such as request_id"}
	}
	newKey := cfg.NewKey
	if newKey == nil {
		newKey = idemkey.NewV7
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if methods != nil && !methods[method] {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		md, _ := metadata.FromOutgoingContext(ctx)
		keys := md[MetadataKey]
		if len(keys) > 1 {
			return fmt.Errorf("idemgrpc: the call to %s carries %d %s values: set one", method, len(keys), MetadataKey)
		}
		key := ""
		if len(keys) == 1 {
			if key = keys[0]; key == "" {
				return fmt.Errorf("idemgrpc: the call to %s carries an empty %s: set the call's key, or no %s to have one made", method, MetadataKey, MetadataKey)
			}
		}
		var field protoreflect.FieldDescriptor
		var msg protoreflect.Message
		if cfg.RequestField != "" {
			m, ok := req.(proto.Message)
			if !ok {
				return fmt.Errorf("idemgrpc: the request of %s is a %T, not a protobuf message: ClientConfig.RequestField cannot be set", method, req)
			}
			msg = m.ProtoReflect()
			field = msg.Descriptor().Fields().ByName(cfg.RequestField)
			if field == nil || field.Kind() != protoreflect.StringKind || field.Cardinality() == protoreflect.Repeated {
				return fmt.Errorf("idemgrpc: the request message %s has no string field %s (ClientConfig.RequestField): set ClientConfig.Methods to the methods whose requests have it", msg.Descriptor().FullName(), cfg.RequestField)
			}
			if v := msg.Get(field).String(); v != "" {
				if key != "" && key != v {
					return fmt.Errorf("idemgrpc: the call to %s carries key %q in metadata and %q in its field %s: set one", method, key, v, cfg.RequestField)
				}
				key = v
			}
		}
		if key == "" {
			if parent, ok := idem.KeyFrom(ctx); ok {
				key = idemkey.Derive(parent, method)
			} else {
				key = newKey()
			}
		}
		if len(keys) == 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, MetadataKey, key)
		}
		if field != nil && msg.Get(field).String() == "" {
			c := proto.Clone(req.(proto.Message))
			c.ProtoReflect().Set(field, protoreflect.ValueOfString(key))
			req = c
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}, nil
}

// Replayed reports whether a call's response headers say it was replayed: the
// server did not run the handler, the result is the one stored for the call's key
// (read the headers with grpc.Header).
func Replayed(header metadata.MD) bool {
	vs := header.Get(MetadataReplayed)
	return len(vs) == 1 && vs[0] == "true"
}
