package broker

import (
	"strings"

	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
)

// routeSeparator joins exchange and routing key in a Watermill topic. AMQP
// exchange names may hold only letters, digits, '-', '_', '.' and ':', so
// the first '|' always ends the exchange name.
const routeSeparator = "|"

// Route returns the Watermill topic that a publisher built from
// [RoutedPublisherConfig] sends to exchange with routingKey. One outbox can
// thus feed several exchanges (the trigger's dispatch requests and its
// execution.missed events).
func Route(exchange, routingKey string) string {
	return exchange + routeSeparator + routingKey
}

// SplitRoute is the inverse of [Route]. A topic without a separator is a
// routing key on the default exchange "".
func SplitRoute(topic string) (exchange, routingKey string) {
	exchange, routingKey, ok := strings.Cut(topic, routeSeparator)
	if !ok {
		return "", topic
	}
	return exchange, routingKey
}

// RoutedPublisherConfig is [TopicPublisherConfig] for topics made by [Route]:
// the exchange (durable, type topic, declared on first use) and the routing
// key both come from the topic.
func RoutedPublisherConfig(amqpURL string, channelPoolSize int) amqp.Config {
	cfg := TopicPublisherConfig(amqpURL, "unused", channelPoolSize)
	cfg.Exchange.GenerateName = func(topic string) string {
		exchange, _ := SplitRoute(topic)
		return exchange
	}
	cfg.Publish.GenerateRoutingKey = func(topic string) string {
		_, key := SplitRoute(topic)
		return key
	}
	return cfg
}
