// Package deliver makes one delivery attempt of one execution to its target:
// an HTTP webhook call (signed per Standard Webhooks, with the execution's
// idempotency key and trace context, guarded against SSRF at connect time)
// or an AMQP publish with confirms. It classifies the result as success,
// retryable or permanent failure; what happens next (retry, dead letter) is
// the pipeline's business.
package deliver
