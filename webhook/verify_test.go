package webhook_test

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/webhook"
)

// The Standard Webhooks libraries' published vectors
// (standard-webhooks/libraries/go/webhook_{symmetric,asymmetric}_test.go).
const (
	vecSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vecMsgID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vecTimestamp = 1614265330
	vecPayload   = `{"test": 2432232314}`
	vecV1        = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	vecEdSeed    = "VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="
	vecV1a       = "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag=="
)

var vecTime = time.Unix(vecTimestamp, 0)

func stdHeader(id string, ts int64, sig string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-signature", sig)
	return h
}

// must(f())(t) is f's value, or the test fails with f's error.
func must[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func vecPublicKey(t testing.TB) string {
	seed := must(base64.StdEncoding.DecodeString(vecEdSeed))(t)
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	return "whpk_" + base64.StdEncoding.EncodeToString(pub)
}

func TestStandardVectors(t *testing.T) {
	t.Parallel()
	hmacV := must(webhook.Standard(vecSecret))(t)
	edV := must(webhook.Standard(vecPublicKey(t)))(t)
	for _, tc := range []struct {
		name string
		v    *webhook.StandardVerifier
		sig  string
	}{
		{"v1 HMAC", hmacV, vecV1},
		{"v1a Ed25519", edV, vecV1a},
		{"v1 among others", hmacV, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= " + vecV1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := tc.v.Verify(stdHeader(vecMsgID, vecTimestamp, tc.sig), []byte(vecPayload), vecTime)
			if err != nil || id != vecMsgID {
				t.Fatalf("Verify = %q, %v; want %q, nil", id, err, vecMsgID)
			}
		})
	}
	t.Run("svix- headers", func(t *testing.T) {
		h := http.Header{}
		h.Set("svix-id", vecMsgID)
		h.Set("svix-timestamp", strconv.Itoa(vecTimestamp))
		h.Set("svix-signature", vecV1)
		if id, err := hmacV.Verify(h, []byte(vecPayload), vecTime); err != nil || id != vecMsgID {
			t.Fatalf("Verify = %q, %v", id, err)
		}
	})
}

func TestStandardRefuses(t *testing.T) {
	t.Parallel()
	v := must(webhook.Standard(vecSecret))(t)
	body := []byte(vecPayload)
	for _, tc := range []struct {
		name string
		h    http.Header
		body []byte
		now  time.Time
		want string
	}{
		{"forged signature", stdHeader(vecMsgID, vecTimestamp, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="), body, vecTime, "no signature"},
		{"tampered body", stdHeader(vecMsgID, vecTimestamp, vecV1), []byte(`{"test": 2432232315}`), vecTime, "no signature"},
		{"another id", stdHeader("msg_other", vecTimestamp, vecV1), body, vecTime, "no signature"},
		{"v1a signature of v1 bytes", stdHeader(vecMsgID, vecTimestamp, "v1a,"+strings.TrimPrefix(vecV1, "v1,")), body, vecTime, "no signature"},
		{"partial signature", stdHeader(vecMsgID, vecTimestamp, "v1,"), body, vecTime, "no signature"},
		{"stale", stdHeader(vecMsgID, vecTimestamp, vecV1), body, vecTime.Add(webhook.DefaultTolerance + time.Second), "old"},
		{"from the future", stdHeader(vecMsgID, vecTimestamp, vecV1), body, vecTime.Add(-webhook.DefaultTolerance - time.Second), "future"},
		{"timestamp not a number", stdHeader(vecMsgID, 0, vecV1), body, vecTime, "not a Unix time"},
		{"missing id", stdHeader("", vecTimestamp, vecV1), body, vecTime, "webhook-id"},
		{"id with a space", stdHeader("msg 1", vecTimestamp, vecV1), body, vecTime, "webhook-id has byte 0x20"},
		{"not base64", stdHeader(vecMsgID, vecTimestamp, "v1,***"), body, vecTime, "not base64"},
		{"no comma", stdHeader(vecMsgID, vecTimestamp, "v1"), body, vecTime, "not <version>,<base64>"},
		{"too many", stdHeader(vecMsgID, vecTimestamp, strings.Repeat(vecV1+" ", 17)), body, vecTime, "more than 16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "timestamp not a number" {
				tc.h.Set("webhook-timestamp", "1614265330.5")
			}
			if tc.name == "missing id" {
				tc.h.Del("webhook-id")
			}
			id, err := v.Verify(tc.h, tc.body, tc.now)
			if !errors.Is(err, webhook.ErrVerification) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Verify = %q, %v; want ErrVerification mentioning %q", id, err, tc.want)
			}
			if strings.Contains(err.Error(), "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") {
				t.Fatalf("the error prints the secret: %v", err)
			}
		})
	}
	t.Run("repeated header", func(t *testing.T) {
		h := stdHeader(vecMsgID, vecTimestamp, vecV1)
		h.Add("webhook-id", "msg_2")
		if _, err := v.Verify(h, body, vecTime); !errors.Is(err, webhook.ErrVerification) {
			t.Fatalf("Verify = %v, want ErrVerification", err)
		}
	})
}

// During a rotation the sender signs with both secrets, or only the new one: a
// receiver that holds both accepts either.
func TestStandardRotation(t *testing.T) {
	t.Parallel()
	newSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("the next secret, 32 bytes long!!"))
	sigNew := "v1," + base64.StdEncoding.EncodeToString(webhook.Sign([]byte("the next secret, 32 bytes long!!"), []byte(vecMsgID+"."+strconv.Itoa(vecTimestamp)+"."+vecPayload)))
	both := must(webhook.Standard(vecSecret, newSecret))(t)
	oldOnly := must(webhook.Standard(vecSecret))(t)
	for _, sig := range []string{vecV1, sigNew, vecV1 + " " + sigNew} {
		if _, err := both.Verify(stdHeader(vecMsgID, vecTimestamp, sig), []byte(vecPayload), vecTime); err != nil {
			t.Errorf("both secrets, %q: %v", sig, err)
		}
	}
	if _, err := oldOnly.Verify(stdHeader(vecMsgID, vecTimestamp, sigNew), []byte(vecPayload), vecTime); err == nil {
		t.Error("a receiver without the new secret accepted a delivery signed only with it")
	}
}

func TestSecretsRefused(t *testing.T) {
	t.Parallel()
	const leaked = "sk_live_DO_NOT_PRINT"
	for _, tc := range []struct {
		name string
		make func() error
	}{
		{"standard none", func() error { _, err := webhook.Standard(); return err }},
		{"standard no prefix", func() error { _, err := webhook.Standard(leaked); return err }},
		{"standard bad base64", func() error { _, err := webhook.Standard("whsec_" + leaked); return err }},
		{"standard short public key", func() error { _, err := webhook.Standard("whpk_QUJD"); return err }},
		{"standard signing key", func() error { _, err := webhook.Standard("whsk_" + leaked); return err }},
		{"stripe API key", func() error { _, err := webhook.Stripe(leaked); return err }},
		{"stripe none", func() error { _, err := webhook.Stripe(); return err }},
		{"github empty", func() error { _, err := webhook.GitHub(""); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.make()
			var ie *idem.InputError
			if !errors.As(err, &ie) || ie.Fix == "" {
				t.Fatalf("err = %v, want an *idem.InputError with a fix", err)
			}
			if strings.Contains(err.Error(), "DO_NOT_PRINT") {
				t.Fatalf("the error prints the secret: %v", err)
			}
		})
	}
}

func stripeHeader(secret string, ts int64, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%d.%s", ts, body)
	return fmt.Sprintf("t=%d,v1=%s", ts, hex.EncodeToString(m.Sum(nil)))
}

func TestStripe(t *testing.T) {
	t.Parallel()
	const secret, next = "whsec_test_secret", "whsec_next_secret"
	const body = `{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","type":"payment_intent.succeeded"}`
	now := time.Unix(1700000000, 0)
	v := must(webhook.Stripe(secret, next))(t)
	h := func(sig string) http.Header { return http.Header{"Stripe-Signature": {sig}} }
	good := stripeHeader(secret, now.Unix(), body)
	for _, sig := range []string{
		good,
		stripeHeader(next, now.Unix(), body),
		good + ",v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39",
		good + ",v1=00ff," + strings.TrimPrefix(stripeHeader(next, now.Unix(), body), fmt.Sprintf("t=%d,", now.Unix())),
		"v1=00," + good + ",scheme=x",
	} {
		id, err := v.Verify(h(sig), []byte(body), now)
		if err != nil || id != "evt_1NG8Du2eZvKYlo2CUI79vXWy" {
			t.Errorf("Verify(%q) = %q, %v", sig, id, err)
		}
	}
	for name, tc := range map[string]struct {
		sig, body string
		now       time.Time
	}{
		"forged":           {stripeHeader("whsec_attacker", now.Unix(), body), body, now},
		"tampered":         {good, strings.Replace(body, "succeeded", "failed", 1), now},
		"expired":          {good, body, now.Add(301 * time.Second)},
		"only v0":          {fmt.Sprintf("t=%d,v0=%s", now.Unix(), strings.Repeat("ab", 32)), body, now},
		"no t":             {strings.SplitN(good, ",", 2)[1], body, now},
		"no id":            {stripeHeader(secret, now.Unix(), `{"object":"event"}`), `{"object":"event"}`, now},
		"body not JSON":    {stripeHeader(secret, now.Unix(), "evt_1"), "evt_1", now},
		"v1 not hex":       {fmt.Sprintf("t=%d,v1=zz", now.Unix()), body, now},
		"two timestamps":   {good + ",t=1", body, now},
		"part without '='": {good + ",v1", body, now},
	} {
		if id, err := v.Verify(h(tc.sig), []byte(tc.body), tc.now); !errors.Is(err, webhook.ErrVerification) {
			t.Errorf("%s: Verify = %q, %v; want ErrVerification", name, id, err)
		}
	}
}

// Stripe's documentation shows this header (docs.stripe.com/webhooks, "Verify
// signatures manually"); its secret is not published, so only the parse is checked.
func TestStripeDocumentedHeader(t *testing.T) {
	t.Parallel()
	ts, v1, err := webhook.ParseStripeSignature("t=1492774577,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd,v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39")
	if err != nil || ts != "1492774577" || len(v1) != 1 || hex.EncodeToString(v1[0]) != "5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd" {
		t.Fatalf("ParseStripeSignature = %q, %x, %v", ts, v1, err)
	}
}

func TestGitHub(t *testing.T) {
	t.Parallel()
	// GitHub's documented example (docs.github.com, "Validating webhook
	// deliveries"): secret "It's a Secret to Everybody", payload "Hello, World!".
	const want = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	v := must(webhook.GitHub("It's a Secret to Everybody"))(t)
	h := http.Header{"X-Github-Delivery": {"72d3162e-cc78-11e3-81ab-4c9367dc0958"}, "X-Hub-Signature-256": {want}}
	if id, err := v.Verify(h, []byte("Hello, World!"), time.Time{}); err != nil || id != "72d3162e-cc78-11e3-81ab-4c9367dc0958" {
		t.Fatalf("Verify = %q, %v", id, err)
	}
	if _, err := v.Verify(h, []byte("Hello, World?"), time.Time{}); !errors.Is(err, webhook.ErrVerification) {
		t.Fatalf("tampered body: %v", err)
	}
	h.Set("X-Hub-Signature-256", strings.TrimPrefix(want, "sha256="))
	if _, err := v.Verify(h, []byte("Hello, World!"), time.Time{}); !errors.Is(err, webhook.ErrVerification) {
		t.Fatalf("without sha256=: %v", err)
	}
}
