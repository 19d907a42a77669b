// Package pipeline delivers dispatch requests: a [Pipeline] consumes the
// per-priority dispatch queues, makes each attempt through a
// deliver.Deliverer and decides what follows; a [Drainer] moves dead letters
// from the dead-letter queue into the store.
//
// # Topology
//
// [Pipeline.Run] declares, before consuming or publishing anything (see
// [Pipeline.Bindings]): the dispatch exchange with one quorum queue per
// priority (broker.DispatchQueues); the retry exchange with one delay queue
// per tier, each with x-message-ttl and a dead-letter exchange back to the
// dispatch exchange (broker.RetryTiers); the dead exchange with the
// dead-letter queue (binding "#"). Lifecycle events go to the executions
// exchange, which the publisher declares; its queues are its consumers'.
//
// # Concurrency and priorities
//
// watermill-amqp hands a subscription's messages over one at a time (the
// next only after the previous is acked or nacked), and a message is
// acknowledged only once its consequences are confirmed and recorded
// (step 6), which takes longer than the delivery itself. So messages in
// hand and deliveries are counted apart. Each priority consumes through
// Workers x Prefetch subscriptions, each on its own AMQP channel with a
// prefetch of one: a message that has left the queue is always being
// handled, never queued behind another message's confirms. The deliveries
// themselves are bounded by the priority's Workers (a slot held from the
// attempt's start to its outcome): that is the bound on concurrent
// requests towards the targets, and waiting for a slot is the only wait
// between a message leaving the queue and its attempt. The attempt's
// sending runs on a sender goroutine kept for it (see senders), whose
// stack has grown to what net/http takes, rather than on the request's
// own new goroutine. Each priority has its own subscriptions and slots
// (Workers.High, .Normal, .Low): a backlog of low, or low deliveries
// stuck on slow targets, never holds up high, which takes only high. An idle priority's slots are not lent to another
// (simple, and the guarantee for high does not depend on a scheduler).
//
// # One message
//
//  1. Decode the DispatchRequest. A message that does not decode, or whose
//     ids are not UUIDs (only a bug upstream makes one), is poison: logged
//     with its id, counted (poison_messages_total) and acknowledged,
//     because a redelivery would fail the same way forever; it cannot be
//     dead-lettered either, since the dead-letter store keys on those ids.
//  2. Completed already (Options.Checks: this attempt or a later one
//     of the execution completed, or the execution is over)? Acknowledge
//     without delivering or emitting anything: a redelivery, e.g. the
//     trigger's relay republishing a request it had not yet marked sent
//     when it crashed. Cancelled (the store's cancellations)? Emit
//     CANCELLED and acknowledge, without delivering. Both are answered by
//     one query, batched across workers. A failed look-up delivers a
//     retry: a database outage must not stop delivery, and the dedupe and
//     cancelling of retries are best-effort while the database is away. A
//     request that may be a second copy (redelivered, or flagged by the
//     relay) is never delivered unasked: it is held, its message in hand,
//     and asked again after a backoff until the look-up answers. The look-up
//     is skipped for what cannot have completed: attempt 1 on its first
//     delivery (no broker.RedeliveredHeader, no x-delivery-count) of its
//     first publish (no outbox.PossibleDuplicateHeader, which the relay
//     sets on every row it may have published before): nearly every
//     message. Whether such a request is cancelled is answered from
//     memory (Options.Cancels, package inflight: every cancellation
//     recorded, followed as a feed), before and again after the wait for a
//     delivery slot.
//  3. Prepare the attempt (deliver.Deliverer.Prepare) and hold the request
//     until its not_before, the slot's time, when the trigger fired it
//     ahead (bounded by Options.MaxHold).
//  4. Deliver (emitting STARTED once the attempt has run
//     Options.StartedEventAfter, at its start when that is zero), under a context that a cancel of the
//     execution aborts (inflight.Registry): an aborted attempt emits
//     CANCELLED, is not retried and completes the execution. Deliver in
//     the message's trace (broker.ExtractTrace, a consumer span with the messaging attributes). Every event is
//     created under a span of the attempt whose context it carries
//     (events of many executions share a broker message), and retries and
//     dead letters are published under producer spans whose context the
//     message carries, so the next attempt continues the same trace.
//  5. Succeeded: SUCCEEDED. Retryable while attempt <= max_retries: publish
//     the request as attempt+1 to the retry exchange with the routing key of
//     its tier ([RetryDelay]: the policy's backoff, at least the target's
//     Retry-After, rounded up to a tier) and priority, and emit FAILED
//     ("...; retry scheduled: attempt n in <tier>"). Otherwise (Permanent,
//     or retries exhausted): publish a dispatcherv1.DeadLetter (the request
//     of the last attempt, signing secret included, which a redrive needs,
//     plus the last outcome: reason, status, excerpt) to the dead exchange
//     with routing key "dead.<namespace>", and emit FAILED and DEAD.
//  6. Acknowledge only when every message the attempt caused (the retry or
//     dead letter, and the event batches that carry its events) is
//     confirmed by the broker, and then the attempt is recorded as
//     completed (final for success and dead; in batches). A failed record
//     does not hold the message back: the completion is kept in memory
//     (bounded, Options.UnrecordedCapacity), where the look-up of step 2
//     finds it, and recorded again every RecordRetryInterval, because a
//     database outage is when the trigger's relay republishes (its deletes
//     failed too) and those copies must not reach the target again. Recording
//     only after the confirms matters: an attempt recorded but whose retry
//     was never published would be dropped on redelivery, and lost. An
//     attempt interrupted mid-delivery is never recorded, so its
//     redelivery reaches the target again, with the same webhook-id. A failed publish nacks the message with
//     requeue, after a backoff. What the attempt called for (its
//     settlement: the events, the retry or the dead letter, decided once)
//     is kept in memory from before the first publish until all of it is
//     confirmed, so a redelivery to this dispatcher publishes it again
//     instead of attempting again: a broker that dies under the requests
//     held for their slot and in flight does not make their targets see
//     them twice (see unsettled). A redelivery to another dispatcher, or
//     after a restart, is attempted again (at least once; the target sees
//     the same webhook-id). A retry published before the failure may make
//     a second retry series, which ends in the same dead letter (the store
//     is idempotent on (execution id, attempt)).
//
// # Lifecycle events
//
// Events are batched across all workers: one ExecutionEventBatch per broker
// message (routing key "execution.<kind of its first event>"), up to
// EventBatch events, published when a publisher slot is free after waiting
// at most EventLinger for the batch to fill. Under load a batch carries the
// events of many messages; a message is acknowledged when the batches of
// all its events are confirmed. The linger delays acknowledgements, not
// deliveries.
//
// While requests wait for a delivery slot (a crowd of slots due on one
// second, delivered as fast as the slots turn over), the batches are held
// back, for Options.EventHold at most, so that the consequences of the
// crowd's first deliveries (the events' publish and confirm, their
// consumers' decoding and writes, the completion records) do not take the
// cores from its later ones (see backlog).
//
// An attempt's STARTED is emitted only once the attempt has run
// Options.StartedEventAfter (see startAnnouncement): most attempts take
// milliseconds and emit their outcome alone, which carries the start
// time, so every consumer decodes one event per attempt instead of two.
// A STARTED that is emitted is confirmed before the acknowledgement, as
// the outcome is, and never after the outcome is emitted.
//
// # Shutdown
//
// When Run's context ends the subscriptions stop taking messages (what
// the broker has sent but no subscription has taken returns to the
// queue); deliveries under way get DrainTimeout
// to finish and to have their consequences confirmed. Past it they are
// interrupted (their context ends), their outcome is ignored and their
// messages are requeued: an interrupted attempt says nothing about the
// target. A dispatcher killed outright loses nothing either: its
// unacknowledged messages return to the queue when its connection drops.
package pipeline
