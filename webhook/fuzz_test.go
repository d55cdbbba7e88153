package webhook_test

import (
	"errors"
	"net/http"
	"strconv"
	"testing"

	"github.com/idemhq/idem/webhook"
)

// The header parsers face the internet before anything is verified: they must
// never panic, and refuse with ErrVerification, whatever the input.
func FuzzParseStandardSignatures(f *testing.F) {
	for _, s := range []string{vecV1, vecV1a, "v1, v2,abc", "", " ", "v1,=== v1a,", "v1,a v1,b v1,c"} {
		f.Add(s)
	}
	v := must(webhook.Standard(vecSecret, vecPublicKey(f)))(f)
	f.Fuzz(func(t *testing.T, header string) {
		sigs, err := webhook.ParseStandardSignatures(header)
		if err != nil && !errors.Is(err, webhook.ErrVerification) {
			t.Fatalf("error %v does not wrap ErrVerification", err)
		}
		if err == nil && (len(sigs) == 0 || len(sigs) > 16) {
			t.Fatalf("%d signatures accepted", len(sigs))
		}
		id, err := v.Verify(stdHeader(vecMsgID, vecTimestamp, header), []byte(vecPayload), vecTime)
		if err == nil && header != vecV1 && header != vecV1a && id != vecMsgID {
			t.Fatalf("Verify accepted %q with id %q", header, id)
		}
	})
}

func FuzzParseStripeSignature(f *testing.F) {
	for _, s := range []string{"t=1492774577,v1=5257a869,v0=6ffb", "t=1,v1=", "v1=00", "t=,v1=00", ",,,", "t=1,t=2,v1=00"} {
		f.Add(s)
	}
	v := must(webhook.Stripe("whsec_fuzz"))(f)
	f.Fuzz(func(t *testing.T, header string) {
		ts, v1, err := webhook.ParseStripeSignature(header)
		if err != nil {
			if !errors.Is(err, webhook.ErrVerification) {
				t.Fatalf("error %v does not wrap ErrVerification", err)
			}
			return
		}
		if ts == "" || len(v1) == 0 {
			t.Fatalf("accepted %q without a t or a v1", header)
		}
		sec, _ := strconv.ParseInt(ts, 10, 64)
		if _, err := v.Verify(http.Header{"Stripe-Signature": {header}}, []byte(`{"id":"evt_1"}`), vecTime); err == nil && sec != vecTimestamp {
			t.Fatalf("Verify accepted %q", header)
		}
	})
}
