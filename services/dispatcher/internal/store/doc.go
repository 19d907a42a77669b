// Package store is the dispatcher's PostgreSQL state (schema `dispatcher` in
// production): the dead-letter store and the cancelled executions.
//
// Dead letters arrive through the `cronmesh.dead` queue (the pipeline
// publishes them there, the drainer inserts them here in batches), because
// a broker queue can be consumed but neither browsed nor searched. The
// insert is idempotent on (execution_id, attempt): the queue is consumed at
// least once. Each row keeps the DispatchRequest of its last attempt with
// the target's signing secret, which a redrive needs; callers that show a
// dead letter must strip it ([StripSecret]).
//
// A redrive ([Store.Redrive], [Store.RedriveMany]) deletes the row and hands
// it to a publish callback inside one transaction: the row is gone if and
// only if the callback reported the new request on the broker (a crash
// between the broker's confirm and the commit leaves the row, and a second
// redrive delivers again, with the same execution id).
//
// Cancellations are keyed by (execution id, namespace); the pipeline asks
// for many executions at once ([Store.Cancelled]) so that checking every
// message costs one query per batch, not per message.
//
// Times: PostgreSQL keeps microseconds, so every time the store writes is
// truncated to the microsecond first.
package store
