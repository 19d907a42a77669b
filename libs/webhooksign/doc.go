// Package webhooksign signs and verifies webhooks the Standard Webhooks way
// (webhook-id, webhook-timestamp, webhook-signature with HMAC-SHA256 over
// "id.timestamp.body"). It is a copy of the dispatcher's
// services/dispatcher/internal/deliver/sign.go, made importable so the
// alerting service signs its notifications exactly as job deliveries are
// signed; the dispatcher can switch to it and drop its copy.
package webhooksign
