// Package projection keeps the trigger's job table in step with the
// registry: a [Consumer] reads the registry's JobEvents from the
// `cronmesh.trigger.jobs` quorum queue (bound to the `cronmesh.jobs` topic
// exchange with "job.#") and applies them to the store in batches, one
// transaction per batch (store.ApplyBatch).
//
// Every trigger node consumes the same queue (competing consumers), so the
// events of one job may be applied out of order and by different nodes.
// Correctness comes from the store's versioned upsert (an event older than
// the stored version changes nothing; several events of one job in a batch
// are applied in version order), not from delivery order.
//
// The consumer holds Workers subscriptions, each with one message in hand
// at a time; Batches loops gather those messages into batches of up to
// MaxBatch (what is at hand, then what arrives within Linger) and apply
// them. A message is acknowledged only once its batch committed (or its
// event was found stale); a message that can never be applied (it does not
// decode, or the store calls its event invalid) is a poison message:
// logged with its id, counted, and acknowledged, so it cannot block the
// queue, while the rest of its batch is applied. A database error
// negatively acknowledges every message of the batch with requeue, after a
// backoff that pauses that batch loop while the database is unwell.
package projection
