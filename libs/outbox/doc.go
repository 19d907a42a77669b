// Package outbox is a transactional outbox on PostgreSQL with a relay that
// publishes it to RabbitMQ through Watermill.
//
// A service writes its state change and, in the same transaction, the events
// describing it ([Write] into the table created by [Schema]). Either both
// commit or neither does, so no event is lost when the broker is down and no
// event describes a change that was rolled back. A [Relay] then publishes
// the rows with publisher confirms and deletes each row only after its
// confirm.
//
// # Guarantees
//
//   - At least once. A row is deleted only after RabbitMQ confirmed it, so a
//     row is never lost; but a crash (or a lost lock, or a failed DELETE)
//     between confirm and delete publishes it again. Consumers must
//     deduplicate by message id (the Watermill UUID, also the AMQP
//     message-id property), which [Message.MessageID] sets.
//   - Order per aggregate. Messages with the same [Message.AggregateID] are
//     published in id order, that is in insert order, provided that
//     transactions writing the same aggregate are serialized: lock the
//     aggregate (for example UPDATE its row, or SELECT ... FOR UPDATE)
//     before calling [Write]. Otherwise two concurrent transactions could
//     take ids in one order and commit in the other, and the later id could
//     be published before the earlier one becomes visible. With duplicates,
//     the order holds for first deliveries: a redelivered message is always
//     followed again by its successors. Different aggregates have no
//     relative order.
//   - One publisher per outbox. Relays coordinate with a PostgreSQL advisory
//     lock, so several replicas of a service can run a relay each: one
//     publishes, the others stand by and take over when it stops or its
//     database connection dies.
//
// # Tracing
//
// A row written with a W3C trace context in its headers (the trace of the
// change that wrote it) is published, when [RelayOptions.TracerProvider]
// is set, under a producer span of that trace carrying the OpenTelemetry
// messaging attributes, and the message carries the publish span's
// context: the consumer's span follows the publish, and the time a row
// waited in the outbox shows in the trace.
//
// # Due times
//
// A message written with a [Message.DueAt], the moment what it announces
// was due (the trigger's: a slot's firing time), is timed where a promise
// like "published within 100 ms of its time" is kept: when the broker
// confirms it, the relay observes the confirm time minus the due time in
// outbox_due_to_confirm_seconds (see [RelayOptions.Metrics] and
// [RelayOptions.Now]). The due time travels in the row's headers, so the
// table has no column for it, and the relay removes it before publishing.
//
// # Schema and search_path
//
// Names in [Schema] and in the queries are unqualified: the pool's
// search_path selects the schema, so one service's outbox lives in that
// service's schema and tests can isolate themselves in throwaway schemas.
package outbox
