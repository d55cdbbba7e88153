package idemgrpc

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/metrics"
)

// callKey returns the key of a call: the one value of the idempotency-key
// metadata, else Config.RequestField of the request. found is false for a call
// that carries none; err is an InvalidArgument status for one that carries a bad
// one.
func callKey(md metadata.MD, req any, field protoreflect.Name) (key string, found bool, err error) {
	vs := md[MetadataKey]
	if len(vs) > 1 {
		return "", false, statusf(codes.InvalidArgument, ReasonInvalidKey, nil,
			"idem: metadata %s is sent %d times: send it exactly once", MetadataKey, len(vs))
	}
	if len(vs) == 1 {
		key, found = vs[0], true
	}
	if field != "" {
		v, err := fieldKey(req, field)
		if err != nil {
			return "", false, err
		}
		switch {
		case v != "" && found && v != key:
			return "", false, statusf(codes.InvalidArgument, ReasonInvalidKey, nil,
				"idem: the request's field %s (%q) and metadata %s (%q) carry different keys: send one key, or the same in both", field, v, MetadataKey, key)
		case v != "":
			key, found = v, true
		}
	}
	if !found {
		return "", false, nil
	}
	if err := idemkey.ValidateHeader(key); err != nil {
		where := "metadata " + MetadataKey
		if len(vs) == 0 {
			where = "the request's field " + string(field)
		}
		if ie, ok := errors.AsType[*idem.InputError](err); ok {
			e := *ie
			e.Field = where
			err = &e
		}
		return "", false, statusf(codes.InvalidArgument, ReasonInvalidKey, nil, "%v", err)
	}
	return key, true, nil
}

// fieldKey reads the string field named field of req.
func fieldKey(req any, field protoreflect.Name) (string, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return "", statusf(codes.Internal, ReasonInvalidKey, nil, "idem: the request is a %T, not a protobuf message: Config.RequestField cannot be read", req)
	}
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName(field)
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.Cardinality() == protoreflect.Repeated {
		return "", statusf(codes.InvalidArgument, ReasonInvalidKey, nil,
			"idem: the request message %s has no string field %s (Config.RequestField): configure Config.Methods to the methods whose requests carry it", r.Descriptor().FullName(), field)
	}
	return r.Get(fd).String(), nil
}

// refuse returns the status of a key that must not run whatever the store holds:
// too old, dated in the future, or untimed where timed keys are required. It runs
// before the claim, for the reasons idemhttp gives.
func (s *server) refuse(key string) error {
	if s.cfg.MaxKeyAge < 0 {
		return nil
	}
	if _, timed := idemkey.TimeOf(key); !timed && !s.cfg.RequireTimedKeys {
		return nil
	}
	err := idemkey.CheckFresh(key, s.cfg.MaxKeyAge, s.cfg.Now())
	if se, ok := errors.AsType[*idemkey.StaleError](err); ok {
		s.m.Refused(metrics.RefusedStaleKey)
		return statusf(codes.FailedPrecondition, ReasonKeyExpired, nil,
			"idem: idempotency key %q was made at %s, %v ago, longer than the %v this server keeps keys, so the call was not run: its first attempt may have taken effect and been forgotten; do not retry it, check whether it took effect and make a new call with a new key only if it did not",
			key, idem.FormatDeadline(se.Time), se.Age.Round(time.Second), se.Window)
	}
	if fe, ok := errors.AsType[*idemkey.FutureError](err); ok {
		s.m.Refused(metrics.RefusedFutureKey)
		return statusf(codes.InvalidArgument, ReasonKeyFromFuture, nil,
			"idem: idempotency key %q is dated %s, %v ahead of this server's clock, more than the %v allowed skew, so the call was not run: the client's clock is wrong; fix it (NTP) and call again",
			key, idem.FormatDeadline(fe.Time), fe.Ahead.Round(time.Second), idemkey.MaxSkew)
	}
	if err != nil && s.cfg.RequireTimedKeys {
		s.m.Refused(metrics.RefusedUntimedKey)
		return statusf(codes.InvalidArgument, ReasonUntimedKey, nil,
			"idem: idempotency key %q is not a UUIDv7 or ULID, and this server requires keys that carry their time; send a UUIDv7 (idemkey.NewV7, what UnaryClientInterceptor sends) or a ULID", key)
	}
	return nil
}

// keyDesc names a key in messages.
func keyDesc(k idem.Key) string { return fmt.Sprintf("%q", k.ID) }
