// Package webhooksign signs and verifies webhooks the Standard Webhooks way
// (webhook-id, webhook-timestamp, webhook-signature with HMAC-SHA256 over
// "id.timestamp.body"): the one copy of it, with which the dispatcher signs
// job deliveries and alerting its notifications, so both are verified the
// same way.
package webhooksign
