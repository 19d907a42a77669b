package webhooksign

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cronmesh/cronmesh/libs/execid"
)

// The Standard Webhooks headers (https://www.standardwebhooks.com). Header
// names are case-insensitive on the wire; Go sends them canonicalized
// ("Webhook-Id").
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
	// HeaderIdempotencyKey carries the execution id too, for targets that
	// deduplicate on the (Stripe-style, unquoted) Idempotency-Key header.
	HeaderIdempotencyKey = "Idempotency-Key"
)

// SecretPrefix starts every signing secret: "whsec_" and the standard base64
// of the HMAC key.
const SecretPrefix = "whsec_"

// Key sizes the registry accepts for a signing secret, in bytes after base64
// decoding.
const (
	MinSecretBytes = 24
	MaxSecretBytes = 64
)

// DefaultTolerance is the clock skew [Verify] accepts between a webhook's
// timestamp and the receiver's clock when the caller passes 0: the Standard
// Webhooks reference libraries use 5 minutes.
const DefaultTolerance = 5 * time.Minute

// Errors of [Sign] and [Verify]. They never contain the secret.
var (
	// ErrNoSecret: the secret is empty.
	ErrNoSecret = errors.New("webhooksign: no signing secret")
	// ErrInvalidSecret: the secret is not "whsec_" and the standard base64
	// of 24 to 64 bytes.
	ErrInvalidSecret = errors.New(`deliver: invalid signing secret: want "whsec_" and base64 of 24 to 64 bytes`)
	// ErrMissingHeaders: webhook-id, webhook-timestamp or webhook-signature
	// is absent.
	ErrMissingHeaders = errors.New("webhooksign: missing webhook-id, webhook-timestamp or webhook-signature header")
	// ErrInvalidTimestamp: webhook-timestamp is not an integer of Unix
	// seconds.
	ErrInvalidTimestamp = errors.New("webhooksign: invalid webhook-timestamp header")
	// ErrTimestampTooOld: the timestamp is more than the tolerance before
	// now (a replay, or a receiver clock far ahead).
	ErrTimestampTooOld = errors.New("webhooksign: webhook timestamp too old")
	// ErrTimestampTooNew: the timestamp is more than the tolerance after
	// now.
	ErrTimestampTooNew = errors.New("webhooksign: webhook timestamp too new")
	// ErrNoMatchingSignature: no "v1," signature in the header matches.
	ErrNoMatchingSignature = errors.New("webhooksign: no matching webhook signature")
	// ErrSlotMismatch: the cronmesh-nominal-time, cronmesh-job-id or
	// cronmesh-execution-id header is absent, malformed, or not the slot
	// the signed webhook-id was derived from.
	ErrSlotMismatch = errors.New("webhooksign: the slot headers do not match the signed webhook-id")
)

// The slot headers VerifySlot checks (slotinfo names all of them; they are
// repeated here so that a receiver importing this package pulls in nothing
// of the dispatcher's).
const (
	headerNominalTime = "cronmesh-nominal-time"
	headerJobID       = "cronmesh-job-id"
	headerExecutionID = "cronmesh-execution-id"
)

// VerifySlot checks, after [Verify] has accepted a request, that its
// cronmesh-job-id and cronmesh-nominal-time headers name the slot its
// webhook-id belongs to, and that cronmesh-execution-id is the webhook-id.
// The Standard Webhooks signature covers only the id, the timestamp and
// the body; but the execution id is derived from (job id, nominal time)
// (see libs/execid), so a signed id binds those two headers as well. The
// attempt, fire time and trigger kind are not covered: a job that needs
// them authenticated puts them in a body template (the body is signed).
// It returns nil or [ErrSlotMismatch].
func VerifySlot(header http.Header) error {
	id := header.Get(HeaderWebhookID)
	nominal, err := time.Parse(time.RFC3339Nano, header.Get(headerNominalTime))
	if err != nil || id == "" || header.Get(headerExecutionID) != id || execid.For(header.Get(headerJobID), nominal) != id {
		return ErrSlotMismatch
	}
	return nil
}

// Sign returns the Standard Webhooks webhook-signature header value of one
// request: "v1," and the standard base64 of HMAC-SHA256(key, id + "." +
// unix seconds of timestamp + "." + body), where key is the base64-decoded
// part of secret after "whsec_". Sub-second precision of timestamp is
// dropped, as the webhook-timestamp header carries whole seconds. It fails
// with [ErrNoSecret] or [ErrInvalidSecret] (never echoing the secret) when
// the secret is not the registry's format.
func Sign(secret, id string, timestamp time.Time, body []byte) (string, error) {
	key, err := secretKey(secret)
	if err != nil {
		return "", err
	}
	return signature(hmacSHA256(key), id, timestamp.Unix(), body), nil
}

// Verify checks a received webhook as a Standard Webhooks receiver does: the
// three webhook-* headers of header are present, the timestamp is within
// tolerance of now either way (tolerance <= 0 means [DefaultTolerance]), and
// one of the space-separated "v1,<base64>" signatures of the
// webhook-signature header matches body under secret (compared in constant
// time; other versions are skipped, so a receiver keeps working during a
// key rotation that sends several signatures). It returns nil or one of the
// package's sentinel errors (wrapped by nothing, so errors.Is and == both
// work).
//
// body must be the raw bytes received, not a re-encoded JSON document.
func Verify(secret string, header http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	key, err := secretKey(secret)
	if err != nil {
		return err
	}
	id, ts, sigs := header.Get(HeaderWebhookID), header.Get(HeaderWebhookTimestamp), header.Get(HeaderWebhookSignature)
	if id == "" || ts == "" || sigs == "" {
		return ErrMissingHeaders
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrInvalidTimestamp
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	switch at := time.Unix(unix, 0); {
	case now.Sub(at) > tolerance:
		return ErrTimestampTooOld
	case at.Sub(now) > tolerance:
		return ErrTimestampTooNew
	}
	want := []byte(signature(hmacSHA256(key), id, unix, body))
	for candidate := range strings.FieldsSeq(sigs) {
		if !strings.HasPrefix(candidate, "v1,") {
			continue
		}
		if hmac.Equal([]byte(candidate), want) {
			return nil
		}
	}
	return ErrNoMatchingSignature
}

// CheckSecret reports whether secret is in the registry's format, with the
// errors of [Sign] ([ErrNoSecret], [ErrInvalidSecret]); a sender checks it
// before building a request that could then not be signed.
func CheckSecret(secret string) error {
	_, err := secretKey(secret)
	return err
}

// secretKey decodes a "whsec_" secret into its HMAC key. The format is the
// registry's (see its validation): a secret it accepted always decodes.
func secretKey(secret string) ([]byte, error) {
	if secret == "" {
		return nil, ErrNoSecret
	}
	b64, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, ErrInvalidSecret
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return nil, ErrInvalidSecret
	}
	return key, nil
}

// signature computes "v1,<base64 HMAC>" with mac, a fresh HMAC-SHA256.
func signature(mac hash.Hash, id string, unix int64, body []byte) string {
	var ts [20]byte
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write(strconv.AppendInt(ts[:0], unix, 10))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// hmacSHA256 returns a fresh HMAC-SHA256 keyed with key.
func hmacSHA256(key []byte) hash.Hash { return hmac.New(sha256.New, key) }
