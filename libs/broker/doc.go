// Package broker is the Watermill-on-RabbitMQ plumbing shared by cronmesh
// services.
//
// Topology. Every service publishes to a durable topic exchange whose name is
// fixed per deployment (for example "cronmesh.events"). Watermill's "topic"
// argument to Publish is the AMQP routing key ("job.created",
// "dispatch.requested", ...), not an exchange name: see
// [TopicPublisherConfig]. Consumers own a durable quorum queue bound to that
// exchange with a binding key such as "job.*" or "#": see
// [TopicSubscriberConfig]. Messages published while no queue is bound are
// dropped by RabbitMQ (the publisher is still confirmed), so consumers'
// queues must exist before events matter to them; subscribing once at deploy
// time is enough because the queues are durable.
//
// Delivery semantics. Publishing uses publisher confirms and persistent
// delivery, so a nil error from Publish means the broker has taken
// responsibility for the message. Consumption is at-least-once: Watermill
// acks only after the handler returns nil, and a crashed consumer's
// unacknowledged messages are redelivered. Consumers therefore deduplicate by
// message id ([message.Message.UUID], also carried as the AMQP message-id
// property).
//
// Connection handling. [Publisher] is a [message.Publisher] driven by the
// same watermill-amqp Config, written directly on amqp091-go because
// watermill-amqp v3.1.0's own Publisher races and can deadlock or panic
// across connection loss (see [Publisher]). It connects on first use, so a
// broker that is down when a service starts is not fatal, and reconnects on
// a later Publish after the connection is lost, while Publish returns errors
// in the meantime. Subscribers use watermill-amqp's Subscriber with
// [TopicSubscriberConfig].
//
// Consuming. [Consumer] is the one consumer of the mesh's queues (the
// history's ingest, alerting's two queues, the trigger's job-event
// projection, the registry's pause on failure and the dispatcher's
// dead-letter drainer): it subscribes with backoff, gathers the messages in
// hand into batches, hands them to a [BatchHandler] in the context of their
// consumer spans, acknowledges each message after its handling succeeded,
// retries failures in place with backoff, drops poison ([ErrPoison]) and
// stops gracefully. The dispatcher's delivery pipeline is the exception:
// it reads several priority queues with per-queue concurrency and settles
// each message when its delivery's consequences are confirmed.
//
// Tracing. [InjectTrace] and [ExtractTrace] carry the W3C trace context in
// message metadata, which watermill-amqp's marshaler maps to AMQP headers.
package broker
