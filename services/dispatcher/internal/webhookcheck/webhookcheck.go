// Package webhookcheck is a Standard Webhooks receiver's verification,
// written for tests from the specification's text alone, without the
// dispatcher's signing code: a test that signs and verifies with the same
// code cannot notice that both read the specification wrong.
//
// The specification: the secret is "whsec_" followed by the standard base64
// of the key; the signed content is "{webhook-id}.{webhook-timestamp}.{body}";
// the signature is HMAC-SHA256 of it, standard base64, sent as "v1,<sig>";
// webhook-signature is a space-separated list of such entries, of which one
// must match; a receiver refuses timestamps too far from its clock.
package webhookcheck

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Verify checks header and body against secret as a receiver does,
// accepting timestamps within tolerance of now. It returns the
// webhook-id.
func Verify(secret string, header http.Header, body []byte, tolerance time.Duration, now time.Time) (string, error) {
	key, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return "", errors.New("secret does not start with whsec_")
	}
	raw, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		return "", fmt.Errorf("secret: %w", err)
	}
	id := header.Get("webhook-id")
	ts := header.Get("webhook-timestamp")
	sigs := header.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return "", fmt.Errorf("missing header: id %q, timestamp %q, signature %q", id, ts, sigs)
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", fmt.Errorf("timestamp %q: %w", ts, err)
	}
	if d := now.Sub(time.Unix(secs, 0)); d > tolerance || d < -tolerance {
		return "", fmt.Errorf("timestamp %s is %s away from now", ts, d)
	}
	mac := hmac.New(sha256.New, raw)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, entry := range strings.Split(sigs, " ") {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			return id, nil
		}
	}
	return "", fmt.Errorf("no v1 signature in %q matches", sigs)
}
