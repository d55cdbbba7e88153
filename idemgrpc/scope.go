package idemgrpc

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/idemhq/idem"
)

// CredentialScope returns a Config.Scope that hashes who the caller is, as the
// transport and the call prove it: the identity of a verified TLS client
// certificate (mutual TLS: its issuer, subject and subject alternative names), then the
// values of the metadata keys (default DefaultCredentialMetadata: authorization,
// x-api-key), each length-prefixed, under SHA-256. The scope is "cred:" and 32 hex
// digits, or "anonymous" for a call that carries none of them. No credential is
// stored in clear, and two callers with different credentials never share a key
// space. A certificate that was presented but not verified counts for nothing:
// the caller merely claims it.
//
// The scope changes whenever a credential does: a retry must carry the same ones
// (a refreshed OAuth token makes a new scope, where the key runs again). When the
// caller's identity is established by an authentication interceptor instead, set
// Config.Scope to read it from the context.
func CredentialScope(keys ...string) func(ctx context.Context) (string, error) {
	var names []string
	for _, k := range keys {
		if k = strings.ToLower(k); !slices.Contains(names, k) {
			names = append(names, k)
		}
	}
	return func(ctx context.Context) (string, error) {
		var stack [256]byte
		b, found := stack[:0], false
		if id, ok := peerIdentity(ctx); ok {
			found = true
			b = appendField(b, id)
		} else {
			b = binary.AppendUvarint(b, 0)
		}
		for _, name := range names {
			vs := metadata.ValueFromIncomingContext(ctx, name)
			found = found || len(vs) > 0
			b = binary.AppendUvarint(b, uint64(len(vs)))
			for _, v := range vs {
				b = appendField(b, v)
			}
		}
		if !found {
			return "anonymous", nil
		}
		sum := sha256.Sum256(b)
		return "cred:" + hex.EncodeToString(sum[:16]), nil
	}
}

// peerIdentity returns the identity of the caller's verified TLS client
// certificate: its issuer, subject and subject alternative names.
func peerIdentity(ctx context.Context) (string, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return "", false
	}
	tlsInfo, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(tlsInfo.State.VerifiedChains) == 0 || len(tlsInfo.State.VerifiedChains[0]) == 0 {
		return "", false
	}
	leaf := tlsInfo.State.VerifiedChains[0][0]
	// The issuer too: a server that trusts several CAs must not let one CA's
	// certificate share the scope of another CA's with the same subject.
	var sb strings.Builder
	sb.WriteString(leaf.Issuer.String())
	sb.WriteString("\x00subject:" + leaf.Subject.String())
	for _, n := range leaf.DNSNames {
		sb.WriteString("\x00dns:" + n)
	}
	for _, u := range leaf.URIs {
		sb.WriteString("\x00uri:" + u.String())
	}
	for _, e := range leaf.EmailAddresses {
		sb.WriteString("\x00email:" + e)
	}
	for _, ip := range leaf.IPAddresses {
		sb.WriteString("\x00ip:" + ip.String())
	}
	return sb.String(), true
}

// TenantScope returns a Config.Scope for a tenant named in metadata combined with
// the scope creds gives the caller's credentials: "tenant:<value>/" followed by
// it. A call without the metadata key, or with it twice, is refused
// InvalidArgument. The tenant alone is never the scope: any caller can claim one.
func TenantScope(key string, creds func(ctx context.Context) (string, error)) func(ctx context.Context) (string, error) {
	key = strings.ToLower(key)
	return func(ctx context.Context) (string, error) {
		vs := metadata.ValueFromIncomingContext(ctx, key)
		if len(vs) != 1 || vs[0] == "" {
			return "", &idem.InputError{Field: "metadata " + key, Reason: fmt.Sprintf("is sent %d times", len(vs)),
				Fix: "send the tenant exactly once"}
		}
		if err := idem.ValidateKeyPart("metadata "+key, vs[0]); err != nil {
			return "", err
		}
		c, err := creds(ctx)
		if err != nil {
			return "", err
		}
		return "tenant:" + vs[0] + "/" + c, nil
	}
}

// appendField appends s to b, prefixed by its length.
func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
