package idemkey_test

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/idemhq/idem/idemkey"
)

// v5 computes a UUIDv5 by the letter of RFC 9562, section 5.5, independently of
// google/uuid: SHA-1 over namespace and name, version and variant bits set.
func v5(ns, name []byte) string {
	sum := sha1.Sum(append(append([]byte{}, ns...), name...))
	u := sum[:16]
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	h := hex.EncodeToString(u)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func uuidBytes(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil {
		panic(err)
	}
	return b
}

// specEncode is the documented encoding: uvarint field count, then uvarint length and
// bytes of each field.
func specEncode(fields ...string) []byte {
	b := binary.AppendUvarint(nil, uint64(len(fields)))
	for _, f := range fields {
		b = append(binary.AppendUvarint(b, uint64(len(f))), f...)
	}
	return b
}

const nameSpaceURL = "6ba7b811-9dad-11d1-80b4-00c04fd430c8" // RFC 9562, appendix C

func TestIntentIsUUIDv5OfTheEncoding(t *testing.T) {
	t.Parallel()
	ns := idemkey.NewNamespace("checkout")
	if want := v5(uuidBytes(nameSpaceURL), []byte("urn:idem:intent:checkout")); ns.String() != want {
		t.Fatalf("NewNamespace(checkout) = %s, want %s", ns, want)
	}
	fields := []string{"cart-7", "2026-03-14T15:09:26.535Z", "", strings.Repeat("x", 300)}
	if got, want := idemkey.Intent(ns, fields...), v5(uuidBytes(ns.String()), specEncode(fields...)); got != want {
		t.Errorf("Intent = %s, want %s", got, want)
	}
	deriveNS := v5(uuidBytes(nameSpaceURL), []byte("urn:idem:derive"))
	if got, want := idemkey.Derive("parent", "step"), v5(uuidBytes(deriveNS), specEncode("parent", "step")); got != want {
		t.Errorf("Derive = %s, want %s", got, want)
	}
}

// TestGolden pins keys made by earlier versions: if it fails, every intent and derived
// key in production would change on deploy and stop deduplicating against the old ones.
func TestGolden(t *testing.T) {
	t.Parallel()
	ns := idemkey.NewNamespace("checkout")
	const parent = "0190a6e4-2b1c-7d3e-8f4a-5b6c7d8e9f0a"
	cases := []struct{ got, want string }{
		{ns.String(), "7fe86264-d610-5f03-8ecf-331080015c7c"},
		{idemkey.Intent(ns, "cart-7", "2026-03-14T15:09:26.535Z"), "81fbbf48-76f6-548c-bc43-5800ffd91c9e"},
		{idemkey.Intent(ns), "92b29b95-2ef9-53bc-99f8-25c6aa23a67d"},
		{idemkey.Derive(parent, "charge"), "63095b84-5d50-55b6-a492-5dd3ced179ae"},
		{idemkey.Derive(idemkey.Derive(parent, "saga"), "reserve"), "eca63ca4-d953-5b14-94e5-044de1377058"},
	}
	for i, tc := range cases {
		if tc.got != tc.want {
			t.Errorf("case %d: got %s, want %s", i, tc.got, tc.want)
		}
	}
}

func TestIntent(t *testing.T) {
	t.Parallel()
	ns := idemkey.NewNamespace("checkout")
	if a, b := idemkey.Intent(ns, "cart-7", "t1"), idemkey.Intent(idemkey.NewNamespace("checkout"), "cart-7", "t1"); a != b {
		t.Errorf("Intent is not deterministic: %s != %s", a, b)
	}
	// Each group lists field lists that must all give different keys.
	distinct := [][][]string{
		{{"ab", "c"}, {"a", "bc"}, {"abc"}, {"a", "b", "c"}},        // field boundaries
		{{}, {""}, {"", ""}, {"", "", ""}},                          // field count
		{{"cart-7", "t1"}, {"cart-7", "t2"}, {"t1", "cart-7"}},      // order and content
		{{"a\x00"}, {"a"}, {"\x01a"}, {"\x01", "a"}, {"\x02\x01a"}}, // bytes of the encoding itself
	}
	for _, group := range distinct {
		seen := map[string]string{}
		for _, fields := range group {
			k := idemkey.Intent(ns, fields...)
			if prev, ok := seen[k]; ok {
				t.Errorf("Intent(%q) = Intent(%s) = %s", fields, prev, k)
			}
			seen[k] = fmt.Sprintf("%q", fields)
			if kind, err := idemkey.Parse(k); kind != idemkey.KindUUIDv5 || err != nil {
				t.Errorf("Parse(Intent(%q)) = %v, %v; want UUIDv5", fields, kind, err)
			}
		}
	}
	if a, b := idemkey.Intent(ns, "cart-7"), idemkey.Intent(idemkey.NewNamespace("refund"), "cart-7"); a == b {
		t.Errorf("two namespaces give the same key %s", a)
	}
	if a, b := idemkey.NewNamespace("a"), idemkey.NewNamespace("b"); a == b {
		t.Errorf("NewNamespace(a) == NewNamespace(b)")
	}
}

func TestDerive(t *testing.T) {
	t.Parallel()
	parent := idemkey.NewV7()
	if a, b := idemkey.Derive(parent, "charge"), idemkey.Derive(parent, "charge"); a != b {
		t.Errorf("Derive is not deterministic: %s != %s", a, b)
	}
	keys := map[string]string{}
	add := func(desc, k string) {
		if prev, ok := keys[k]; ok {
			t.Errorf("%s and %s both derive %s", desc, prev, k)
		}
		keys[k] = desc
	}
	add("parent", parent)
	add("charge", idemkey.Derive(parent, "charge"))
	add("refund", idemkey.Derive(parent, "refund"))
	add("other parent", idemkey.Derive(idemkey.NewV7(), "charge"))
	add("(ab, c)", idemkey.Derive("ab", "c"))
	add("(a, bc)", idemkey.Derive("a", "bc"))
	add("chained", idemkey.Derive(idemkey.Derive(parent, "saga"), "reserve"))
	add("saga", idemkey.Derive(parent, "saga"))
	add("intent with the same fields", idemkey.Intent(idemkey.NewNamespace("derive"), parent, "charge"))

	for _, p := range []string{"", "k", parent, strings.Repeat("p", 10_000), "tenant:op:ключ"} {
		k := idemkey.Derive(p, "step")
		if len(k) != 36 {
			t.Errorf("Derive(%.20q…) has %d characters, want 36", p, len(k))
		}
		if err := idemkey.ValidateHeader(k); err != nil {
			t.Errorf("Derive(%.20q…) = %s fails ValidateHeader: %v", p, k, err)
		}
		if kind, _ := idemkey.Parse(k); kind != idemkey.KindUUIDv5 {
			t.Errorf("Parse(Derive(%.20q…)) = %v, want UUIDv5", p, kind)
		}
	}
}
