package webhook_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/idemhq/idem/webhook"
)

// Verify a Standard Webhooks delivery: the spec libraries' published example.
func ExampleStandard() {
	v, err := webhook.Standard("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	body := []byte(`{"test": 2432232314}`)

	id, err := v.Verify(h, body, time.Unix(1614265330, 0))
	fmt.Println(id, err)
	_, err = v.Verify(h, []byte(`{"test": 1}`), time.Unix(1614265330, 0))
	fmt.Println(err)
	// Output:
	// msg_p5jXN8AQM9LWM0D4loKWxJek <nil>
	// webhook: verification failed: no signature in webhook-signature matches a configured secret: the delivery is forged, or signed with a secret this endpoint does not have (add the new one during a rotation)
}
