package webhookcheck

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSpecVector: the example of the Standard Webhooks specification
// verifies, and changing any part of it does not.
func TestSpecVector(t *testing.T) {
	t.Parallel()
	const (
		secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		id     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		ts     = "1614265330"
		body   = `{"test": 2432232314}`
		sig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	now := time.Unix(1614265330, 0)
	header := func(sigs string) http.Header {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sigs)
		return h
	}
	got, err := Verify(secret, header(sig), []byte(body), time.Minute, now)
	require.NoError(t, err)
	require.Equal(t, id, got)
	_, err = Verify(secret, header("v1,bm90IGl0 "+sig), []byte(body), time.Minute, now)
	require.NoError(t, err, "one matching entry of a list is enough")

	_, err = Verify(secret, header(sig), []byte(body+" "), time.Minute, now)
	require.Error(t, err)
	_, err = Verify("whsec_"+"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", header(sig), []byte(body), time.Minute, now)
	require.Error(t, err)
	_, err = Verify(secret, header("v2,"+sig[3:]), []byte(body), time.Minute, now)
	require.Error(t, err)
	_, err = Verify(secret, header(sig), []byte(body), time.Minute, now.Add(2*time.Minute))
	require.Error(t, err)
}
