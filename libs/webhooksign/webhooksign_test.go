package webhooksign

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/execid"
)

// The Standard Webhooks specification's published test vector, reproduced
// by every reference library (and by svix): the one check here that proves
// interoperability rather than agreement with ourselves.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func vectorHeader(signature string) http.Header {
	h := http.Header{}
	h.Set(HeaderWebhookID, vectorID)
	h.Set(HeaderWebhookTimestamp, strconv.Itoa(vectorTimestamp))
	h.Set(HeaderWebhookSignature, signature)
	return h
}

func TestSignSpecVector(t *testing.T) {
	t.Parallel()
	got, err := Sign(vectorSecret, vectorID, time.Unix(vectorTimestamp, 999_000_000), []byte(vectorBody))
	require.NoError(t, err)
	require.Equal(t, vectorSignature, got)
}

func TestSignRejectsBadSecrets(t *testing.T) {
	t.Parallel()
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
	tests := []struct {
		name, secret string
		want         error
	}{
		{"empty", "", ErrNoSecret},
		{"no prefix", strings.TrimPrefix(vectorSecret, SecretPrefix), ErrInvalidSecret},
		{"not base64", "whsec_***", ErrInvalidSecret},
		{"url-safe base64", "whsec_" + base64.URLEncoding.EncodeToString([]byte(strings.Repeat("\xff", 30))), ErrInvalidSecret},
		{"too short", "whsec_" + b64(MinSecretBytes-1), ErrInvalidSecret},
		{"too long", "whsec_" + b64(MaxSecretBytes+1), ErrInvalidSecret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Sign(tt.secret, "id", time.Unix(1, 0), nil)
			require.ErrorIs(t, err, tt.want)
			if tt.secret != "" {
				require.NotContains(t, err.Error(), tt.secret)
			}
		})
	}
	for _, n := range []int{MinSecretBytes, MaxSecretBytes} {
		_, err := Sign("whsec_"+b64(n), "id", time.Unix(1, 0), nil)
		require.NoError(t, err, "%d bytes", n)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	at := time.Unix(vectorTimestamp, 0)
	other, err := Sign("whsec_"+base64.StdEncoding.EncodeToString(make([]byte, 32)), vectorID, at, []byte(vectorBody))
	require.NoError(t, err)
	tests := []struct {
		name      string
		secret    string
		header    http.Header
		body      string
		tolerance time.Duration
		now       time.Time
		want      error
	}{
		{name: "spec vector", header: vectorHeader(vectorSignature), now: at},
		{name: "within default tolerance, late", header: vectorHeader(vectorSignature), now: at.Add(DefaultTolerance)},
		{name: "within default tolerance, early", header: vectorHeader(vectorSignature), now: at.Add(-DefaultTolerance)},
		{name: "too old", header: vectorHeader(vectorSignature), now: at.Add(DefaultTolerance + time.Second), want: ErrTimestampTooOld},
		{name: "too new", header: vectorHeader(vectorSignature), now: at.Add(-DefaultTolerance - time.Second), want: ErrTimestampTooNew},
		{name: "custom tolerance", header: vectorHeader(vectorSignature), tolerance: time.Hour, now: at.Add(59 * time.Minute)},
		{name: "custom tolerance exceeded", header: vectorHeader(vectorSignature), tolerance: time.Second, now: at.Add(2 * time.Second), want: ErrTimestampTooOld},
		{name: "tampered body", header: vectorHeader(vectorSignature), body: `{"test": 1}`, now: at, want: ErrNoMatchingSignature},
		{name: "wrong secret", header: vectorHeader(other), now: at, want: ErrNoMatchingSignature},
		{
			name: "one of several signatures (key rotation)", now: at,
			header: vectorHeader("v1,bm9wZQ== v2," + vectorSignature[3:] + " " + vectorSignature),
		},
		{name: "only another version", header: vectorHeader("v2," + vectorSignature[3:]), now: at, want: ErrNoMatchingSignature},
		{name: "bare signature without version", header: vectorHeader(vectorSignature[3:]), now: at, want: ErrNoMatchingSignature},
		{name: "no headers", header: http.Header{}, now: at, want: ErrMissingHeaders},
		{
			name: "non-numeric timestamp", now: at, want: ErrInvalidTimestamp,
			header: func() http.Header {
				h := vectorHeader(vectorSignature)
				h.Set(HeaderWebhookTimestamp, "2021-02-25T15:02:10Z")
				return h
			}(),
		},
		{name: "no secret", secret: "-", header: vectorHeader(vectorSignature), now: at, want: ErrNoSecret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			secret := vectorSecret
			switch tt.secret {
			case "-":
				secret = ""
			case "":
			default:
				secret = tt.secret
			}
			body := vectorBody
			if tt.body != "" {
				body = tt.body
			}
			err := Verify(secret, tt.header, []byte(body), tt.tolerance, tt.now)
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.want)
		})
	}
}

func TestVerifySlot(t *testing.T) {
	t.Parallel()
	const job = "0190f0c4-6c1e-7a00-8000-000000000001"
	nominal := time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)
	id := execid.For(job, nominal)
	slot := func(mod func(http.Header)) http.Header {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("cronmesh-execution-id", id)
		h.Set("cronmesh-job-id", job)
		h.Set("cronmesh-nominal-time", "2026-03-29T01:00:00Z")
		if mod != nil {
			mod(h)
		}
		return h
	}
	require.NoError(t, VerifySlot(slot(nil)))
	for name, mod := range map[string]func(http.Header){
		"another nominal time":      func(h http.Header) { h.Set("cronmesh-nominal-time", "2026-03-29T02:00:00Z") },
		"another job":               func(h http.Header) { h.Set("cronmesh-job-id", "0190f0c4-6c1e-7a00-8000-000000000002") },
		"another execution id":      func(h http.Header) { h.Set("cronmesh-execution-id", execid.For(job, nominal.Add(time.Hour))) },
		"no nominal time":           func(h http.Header) { h.Del("cronmesh-nominal-time") },
		"a malformed nominal time":  func(h http.Header) { h.Set("cronmesh-nominal-time", "yesterday") },
		"no webhook-id":             func(h http.Header) { h.Del("webhook-id") },
		"a webhook-id of elsewhere": func(h http.Header) { h.Set("webhook-id", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W") },
	} {
		require.ErrorIs(t, VerifySlot(slot(mod)), ErrSlotMismatch, name)
	}
}
