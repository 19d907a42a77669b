// Package inflight stops an execution wherever it is on this dispatcher
// replica, whichever replica recorded its cancellation.
//
// Registry holds the cancel func of every attempt under way, keyed by
// (namespace, execution id): Abort cancels the attempt's context with the
// cause ErrAborted, which the pipeline reads as "cancelled, do not retry"
// (a shutdown cancels the parent context instead, without that cause).
//
// Watcher follows the cancellations table, the one record of cancels (a
// cancel is committed there before CancelExecution answers, so it survives
// any restart). Every PollInterval (default 250 ms) it reads what was
// recorded since its last read, adds it to a set of known cancellations
// and aborts the matching attempts of the Registry. So a cancel recorded
// through any replica reaches:
//   - an attempt in flight on any replica within PollInterval plus one
//     query (the bound documented: under 1 s with the defaults);
//   - a queued first attempt, which the pipeline drops when it meets it,
//     without a database look-up (Known answers from memory; the first
//     read, before the pipeline consumes, loads every cancellation still
//     kept).
//
// The replica that receives the RPC does not wait for the poll: Cancel
// marks the execution known and aborts its own attempt at once.
//
// Anything that wants an execution stopped (CancelExecution, an overlap
// policy cancelling the running execution of a job) records a cancellation
// in the store and calls Watcher.Cancel; nothing else is needed.
package inflight
