package e2e_test

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// verifyStandardWebhook checks a request's Standard Webhooks signature,
// written from the specification rather than with libs/webhooksign, so a
// mistake shared by the signer and the project's own verifier cannot hide:
// the secret is "whsec_" and the base64 of the HMAC key; the signed content
// is "{webhook-id}.{webhook-timestamp}.{body}"; webhook-signature is a
// space-separated list of "v1,<base64 HMAC-SHA256>", any of which may
// match; the timestamp must be within five minutes of now.
func verifyStandardWebhook(secret string, header http.Header, body []byte, now time.Time) error {
	id, ts, sigs := header.Get("webhook-id"), header.Get("webhook-timestamp"), header.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	seconds, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q is not Unix seconds", ts)
	}
	if skew := now.Sub(time.Unix(seconds, 0)); skew > 5*time.Minute || skew < -5*time.Minute {
		return fmt.Errorf("webhook-timestamp %d is %s away from now", seconds, skew)
	}
	encoded, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return errors.New(`secret lacks the "whsec_" prefix`)
	}
	key, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return fmt.Errorf("secret is not base64: %w", err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(sigs) {
		version, value, ok := strings.Cut(sig, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(value)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("no v1 signature in %q matches", sigs)
}

// newSigningSecret returns a fresh Standard Webhooks secret.
func newSigningSecret(t testing.TB) string {
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		t.Fatal(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key[:])
}

// delivery is one request a recorder received.
type delivery struct {
	At     time.Time // when the handler saw it (monotonic)
	Method string
	Header http.Header
	Body   []byte
	Status int // what the recorder answered
}

// ID is the request's webhook-id.
func (d delivery) ID() string { return d.Header.Get("webhook-id") }

// recorder is an HTTP target that records every request and answers the
// status it is told to (set before the mesh may call it).
type recorder struct {
	URL    string
	status atomic.Int32

	mu  sync.Mutex
	got []delivery
}

func newRecorder(t testing.TB, status int) *recorder {
	r := &recorder{}
	r.status.Store(int32(status))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		status := int(r.status.Load())
		r.mu.Lock()
		r.got = append(r.got, delivery{At: time.Now(), Method: req.Method, Header: req.Header.Clone(), Body: body, Status: status})
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// Answer makes every later request get status.
func (r *recorder) Answer(status int) { r.status.Store(int32(status)) }

// All returns the requests so far, in arrival order.
func (r *recorder) All() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// ByID returns the requests carrying webhook-id id, in arrival order.
func (r *recorder) ByID(id string) []delivery {
	var out []delivery
	for _, d := range r.All() {
		if d.ID() == id {
			out = append(out, d)
		}
	}
	return out
}

// IDs returns the distinct webhook-ids seen, in order of first arrival.
func (r *recorder) IDs() []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range r.All() {
		if !seen[d.ID()] {
			seen[d.ID()] = true
			out = append(out, d.ID())
		}
	}
	return out
}

// TestScenarioVerifierKnownVector checks the scenarios' verifier against
// the example in the Standard Webhooks specification, so that it does not
// merely agree with the signer it checks.
func TestScenarioVerifierKnownVector(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body := []byte(`{"test": 2432232314}`)
	now := time.Unix(1614265330, 0)
	if err := verifyStandardWebhook(secret, h, body, now); err != nil {
		t.Fatalf("the specification's example does not verify: %v", err)
	}
	if err := verifyStandardWebhook(secret, h, []byte(`{"test": 2432232315}`), now); err == nil {
		t.Fatal("a changed body verified")
	}
	if err := verifyStandardWebhook(secret, h, body, now.Add(6*time.Minute)); err == nil {
		t.Fatal("a timestamp six minutes old verified")
	}
}
