package broker

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// DefaultChannelPoolSize is the number of AMQP channels a publisher built
// from [TopicPublisherConfig] keeps open when the caller passes 0. With
// publisher confirms each channel carries one unconfirmed message at a time,
// so this bounds the number of Publish calls that make progress concurrently.
const DefaultChannelPoolSize = 16

// DefaultPrefetch is the consumer prefetch (AMQP basic.qos) that
// [TopicSubscriberConfig] uses when the caller passes 0 or less.
const DefaultPrefetch = 16

// dialTimeout bounds TCP connect plus the AMQP handshake. amqp091's default of
// 30s would stall every Publish behind a black-holed broker address for that
// long; 5s is plenty on a LAN.
const dialTimeout = 5 * time.Second

// TopicPublisherConfig returns a watermill-amqp Config for publishing to the
// durable topic exchange named exchange, with publisher confirms and
// persistent delivery.
//
// Watermill's "topic" argument to Publish is used as the AMQP routing key; the
// exchange name is fixed. The publisher declares the exchange (durable, type
// topic) on first use. [Publisher] does so once per connection;
// watermill-amqp's own Publisher, which accepts this config too, once per
// distinct routing key, so with it routing keys should come from a small
// fixed set ("job.created", not "job.<id>").
//
// channelPoolSize is the number of pooled AMQP channels; 0 or less means
// [DefaultChannelPoolSize]. Each channel waits for its message's confirm
// before it is reused, so throughput comes from concurrent Publish calls, up
// to channelPoolSize of them.
//
// The message's UUID is also sent as the AMQP message-id property (see
// [Marshaler]). An empty exchange publishes through the default exchange,
// where the routing key names a queue.
func TopicPublisherConfig(amqpURL, exchange string, channelPoolSize int) amqp.Config {
	if channelPoolSize <= 0 {
		channelPoolSize = DefaultChannelPoolSize
	}
	return amqp.Config{
		Connection: connectionConfig(amqpURL),
		Marshaler:  Marshaler{},
		Exchange:   topicExchange(exchange),
		Publish: amqp.PublishConfig{
			GenerateRoutingKey: func(topic string) string { return topic },
			ConfirmDelivery:    true,
			ChannelPoolSize:    channelPoolSize,
		},
		TopologyBuilder: &amqp.DefaultTopologyBuilder{},
	}
}

// TopicSubscriberConfig returns a watermill-amqp Config that consumes from the
// durable quorum queue named queue, bound to the durable topic exchange named
// exchange with bindingKey (for example "job.*" or "#").
//
// The Subscribe "topic" argument is ignored for naming: queue, exchange and
// binding all come from the arguments here, so any string (conventionally the
// queue name) may be passed. Subscribing declares the exchange, the queue and
// the binding, idempotently.
//
// prefetch is the AMQP QoS prefetch count per Subscribe call; 0 or less means
// [DefaultPrefetch]. watermill-amqp hands messages to the handler one at a
// time and acks each only after the handler returns nil (a handler error
// nacks and requeues it), so prefetch only hides network latency; it does not
// add handler concurrency. For parallelism subscribe several times.
//
// Poison messages are redelivered forever. A caller that wants a limit can
// set Queue.Arguments["x-delivery-limit"] together with a dead-letter
// exchange on the returned Config before the queue is first declared.
func TopicSubscriberConfig(amqpURL, exchange, queue, bindingKey string, prefetch int) amqp.Config {
	if prefetch <= 0 {
		prefetch = DefaultPrefetch
	}
	return amqp.Config{
		Connection: connectionConfig(amqpURL),
		Marshaler:  Marshaler{},
		Exchange:   topicExchange(exchange),
		Queue: amqp.QueueConfig{
			GenerateName: amqp.GenerateQueueNameConstant(queue),
			Durable:      true,
			// Quorum queues are replicated and survive a node loss; RabbitMQ
			// requires them to be durable and non-exclusive.
			Arguments: amqp091.Table{"x-queue-type": "quorum"},
		},
		QueueBind: amqp.QueueBindConfig{
			GenerateRoutingKey: func(string) string { return bindingKey },
		},
		Consume: amqp.ConsumeConfig{
			Qos: amqp.QosConfig{PrefetchCount: prefetch},
		},
		TopologyBuilder: &amqp.DefaultTopologyBuilder{},
	}
}

// topicExchange is the durable topic exchange named exchange, as
// publishers and subscribers declare it.
func topicExchange(exchange string) amqp.ExchangeConfig {
	return amqp.ExchangeConfig{
		GenerateName: amqp.GenerateExchangeNameConstant(exchange),
		Type:         "topic",
		Durable:      true,
	}
}

// connectionConfig is the connection part shared by publishers and
// subscribers.
func connectionConfig(amqpURL string) amqp.ConnectionConfig {
	return amqp.ConnectionConfig{
		AmqpURI: amqpURL,
		AmqpConfig: &amqp091.Config{
			Dial:      amqp091.DefaultDial(dialTimeout),
			Heartbeat: 10 * time.Second,
			Locale:    "en_US",
		},
		// watermill-amqp's default backs off up to 60s between reconnect
		// attempts, which would delay events by up to a minute after a short
		// broker restart. Capping at 5s costs one cheap dial per 5s while the
		// broker is down.
		Reconnect: &amqp.ReconnectConfig{
			BackoffInitialInterval:     200 * time.Millisecond,
			BackoffRandomizationFactor: 0.5,
			BackoffMultiplier:          2,
			BackoffMaxInterval:         5 * time.Second,
		},
	}
}

// Marshaler is the watermill-amqp marshaler used by the configs of this
// package. It behaves like [amqp.DefaultMarshaler] (persistent delivery,
// metadata as string headers, the UUID in the "_watermill_message_uuid"
// header) with three differences:
//
//   - Marshal also sets the AMQP message-id property to the message UUID, so
//     non-Watermill consumers can deduplicate too.
//   - Unmarshal takes the UUID from the message-id property when the Watermill
//     header is absent (messages published by other clients), instead of
//     leaving it empty; and a delivery without any headers no longer makes
//     the default marshaler panic.
//   - Unmarshal converts non-string header values to strings instead of
//     failing. RabbitMQ itself adds such headers: quorum queues set the
//     integer "x-delivery-count" on redelivery, and dead-lettering adds
//     "x-death". The default marshaler rejects those deliveries, and
//     watermill-amqp then nacks and requeues them forever.
//   - Unmarshal sets [RedeliveredHeader] on a delivery the broker flags as
//     redelivered, which watermill-amqp does not pass on otherwise; Marshal
//     drops it, so a message published on from a redelivery is not taken
//     for one.
type Marshaler struct{}

// RedeliveredHeader is the metadata key [Marshaler] sets to "true" on a
// message the broker delivered before (AMQP's redelivered flag: it went
// to a consumer that did not ack it). A consumer that deduplicates can
// keep its look-up for such messages and skip it for first deliveries.
const RedeliveredHeader = "cronmesh-redelivered"

// Marshal converts msg to an AMQP publishing; see [Marshaler].
func (Marshaler) Marshal(msg *message.Message) (amqp091.Publishing, error) {
	p, err := amqp.DefaultMarshaler{}.Marshal(msg)
	if err != nil {
		return p, err
	}
	delete(p.Headers, RedeliveredHeader)
	p.MessageId = msg.UUID
	return p, nil
}

// Unmarshal converts an AMQP delivery to a Watermill message; see
// [Marshaler].
func (Marshaler) Unmarshal(d amqp091.Delivery) (*message.Message, error) {
	headers := make(amqp091.Table, len(d.Headers)+1)
	for k, v := range d.Headers {
		headers[k] = headerString(v)
	}
	if _, ok := headers[amqp.DefaultMessageUUIDHeaderKey]; !ok {
		headers[amqp.DefaultMessageUUIDHeaderKey] = d.MessageId
	}
	if d.Redelivered {
		headers[RedeliveredHeader] = "true"
	} else {
		delete(headers, RedeliveredHeader) // only the broker's flag says so
	}
	d.Headers = headers
	return amqp.DefaultMarshaler{}.Unmarshal(d)
}

// headerString renders an AMQP header value as metadata text.
func headerString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case nil:
		return ""
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano)
	default:
		return fmt.Sprint(v)
	}
}
