// Package deliver makes one delivery attempt of one execution to its target:
// an HTTP webhook call (signed per Standard Webhooks, with the execution's
// idempotency key and trace context, guarded against SSRF at connect time)
// or an AMQP publish with confirms. It classifies the result as success,
// retryable or permanent failure; what happens next (retry, dead letter) is
// the pipeline's business.
//
// An attempt is prepared first ([Deliverer.Prepare]: the checks, the body,
// the request with its headers and signature) and made later
// ([Attempt.Make]): the pipeline prepares a request fired ahead of its slot
// while it holds it, so that only the sending is left when the slot's time
// comes, with thousands of others. A request sent in another second than
// the one it was signed for is signed again, so its webhook-timestamp is
// always the second it was sent in.
//
// [Client] is the [Deliverer]. HTTP attempts carry the Standard Webhooks
// headers (webhooksign.Sign; receivers check them with webhooksign.Verify
// and webhooksign.VerifySlot), the execution id as Idempotency-Key, the
// cronmesh-* slot headers (libs/slotinfo) and the W3C trace context; redirects are not followed and
// every connection goes through an SSRF guard that inspects the resolved
// address in the dialer's Control hook, so DNS rebinding cannot get past
// it. AMQP attempts go through a broker.Publisher built from
// [PublisherConfig], which checks a job's exchange passively (cronmesh never
// creates exchanges for jobs) and refuses cronmesh's own exchanges and
// queues; the slot headers go in the message's header table. A body whose
// format is BODY_FORMAT_TEMPLATE is rendered for each attempt, so a retry's
// body says attempt 2.
package deliver
