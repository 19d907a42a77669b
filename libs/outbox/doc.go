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
// # Grouped rows
//
// [WriteGrouped] stores many messages in one row: the messages of one
// partition and routing key share a row (up to [MaxGroupMessages] and
// [MaxGroupBytes]), its payload a cronmesh.broker.v1.MessageBatch of
// their ids, headers and payloads and its headers [GroupHeader], so a
// transaction writing a thousand messages over a hundred partitions
// inserts about a hundred rows, and the relay deletes as many (ADR 0019).
// The relay takes such a row apart and publishes each message as if it
// had been written alone: the guarantees below hold per message, and a
// row is deleted only once every message of it is confirmed; a row of
// which only a part was confirmed is published again whole. Rows of
// [Write] and of WriteGrouped share a table and a relay. [GroupSchema]
// keeps grouped rows out of the TOAST table; [Row.Messages] reads them.
//
// # Guarantees
//
//   - At least once. A row is deleted only after RabbitMQ confirmed it
//     (every message of it, for a grouped row), so a message is never
//     lost; but a crash (or a lost lock, or a failed DELETE) between
//     confirm and delete publishes it again, as does a failure within a
//     grouped row for the part of it already confirmed. Consumers must
//     deduplicate by message id (the Watermill UUID, also the AMQP
//     message-id property), which [Message.MessageID] sets; the relay
//     flags what it may have published before ([PossibleDuplicateHeader]).
//   - Order per aggregate. Messages with the same [Message.AggregateID] are
//     published in id order, that is in insert order, provided that
//     transactions writing the same aggregate are serialized: lock the
//     aggregate (for example UPDATE its row, or SELECT ... FOR UPDATE)
//     before calling [Write]. Otherwise two concurrent transactions could
//     take ids in one order and commit in the other, and the later id could
//     be published before the earlier one becomes visible. With duplicates,
//     the order holds for first deliveries: a redelivered message is always
//     followed again by its successors. Different aggregates have no
//     relative order. The rows of [WriteGrouped] are ordered by partition
//     (see [PartitionAggregate]), which keeps the order of the aggregates
//     in them; an aggregate's messages must then all be written grouped.
//   - One publisher per outbox. Relays coordinate with a PostgreSQL advisory
//     lock, so several replicas of a service can run a relay each: one
//     publishes, the others stand by and take over when it stops or its
//     database connection dies. With [RelayOptions.Ownership], one
//     publisher per partition instead: each relay publishes the rows of
//     the partitions it owns, checking its ownership (fenced by epoch)
//     before every chunk of 64 messages, grouped rows' included.
//
// # Tracing
//
// A message written with a W3C trace context in its headers (the trace of
// the change that wrote it; each message of a grouped row its own) is
// published, when [RelayOptions.TracerProvider] is set, under a producer
// span of that trace carrying the OpenTelemetry
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
// [RelayOptions.Now]). The due time travels in the message's headers (a
// grouped row's messages each in their own), so the table has no column
// for it, and the relay removes it before publishing.
//
// # Schema and search_path
//
// Names in [Schema] and in the queries are unqualified: the pool's
// search_path selects the schema, so one service's outbox lives in that
// service's schema and tests can isolate themselves in throwaway schemas.
package outbox
