// Package projection keeps the trigger's job table in step with the
// registry: a [Consumer] reads the registry's JobEvents from the
// `cronmesh.trigger.jobs` quorum queue (bound to the `cronmesh.jobs` topic
// exchange with "job.#") and applies each one to the store.
//
// Every trigger node consumes the same queue (competing consumers), so the
// events of one job may be applied out of order and by different nodes.
// Correctness comes from the store's versioned upsert (an event older than
// the stored version changes nothing), not from delivery order.
//
// A message is acknowledged once applied (or found stale); a message that
// can never be applied (it does not decode, or the store calls it invalid)
// is a poison message: logged with its id, counted, and acknowledged, so it
// cannot block the queue. A database error negatively acknowledges the
// message with requeue, after a backoff that pauses this consumer while the
// database is unwell.
package projection
