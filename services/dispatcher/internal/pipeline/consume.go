package pipeline

import (
	"context"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/clock"
)

// subscriberConfig is broker.TopicSubscriberConfig for several queues of one
// exchange on one connection: the Subscribe topic is the queue name, and
// bindingKeys maps it to its binding key. The queues are quorum queues,
// declared (idempotently, with the same arguments as broker.DeclareQueues)
// by the first Subscribe of each (broker.SubscribeAll).
func subscriberConfig(amqpURL, exchange string, prefetch int, bindingKeys map[string]string) amqp.Config {
	cfg := broker.TopicSubscriberConfig(amqpURL, exchange, "unused", "unused", prefetch)
	cfg.Queue.GenerateName = func(topic string) string { return topic }
	cfg.QueueBind.GenerateRoutingKey = func(topic string) string { return bindingKeys[topic] }
	return cfg
}

// subscription is one Subscribe call: its messages come one at a time
// (watermill-amqp hands over the next only after the previous is acked or
// nacked), and with a prefetch of one the broker sends it the next only
// then too, so a message it holds is never waiting behind another.
type subscription struct {
	queue    string
	messages <-chan *message.Message
}

// subscribe connects and subscribes counts[queue] times to each queue,
// retrying with backoff until it succeeds or ctx ends (then it returns a
// nil subscriber).
func subscribe(ctx context.Context, cfg amqp.Config, counts map[string]int, logger *slog.Logger, clk clock.Clock, b *backoff) (message.Subscriber, []subscription) {
	for {
		sub, subs, err := trySubscribe(ctx, cfg, counts, logger)
		if err == nil {
			return sub, subs
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		wait := b.next()
		logger.Warn("subscribing failed; retrying", slog.Duration("retry_in", wait), slog.Any("error", err))
		if !sleep(ctx, clk, wait) {
			return nil, nil
		}
	}
}

func trySubscribe(ctx context.Context, cfg amqp.Config, counts map[string]int, logger *slog.Logger) (message.Subscriber, []subscription, error) {
	var topics []string
	for queue, n := range counts {
		for range n {
			topics = append(topics, queue)
		}
	}
	sub, channels, err := broker.SubscribeAll(ctx, cfg, logger, topics)
	if err != nil {
		return nil, nil, err
	}
	subs := make([]subscription, len(topics))
	for i, queue := range topics {
		subs[i] = subscription{queue: queue, messages: channels[i]}
	}
	return sub, subs, nil
}

// sleep waits d on clk; false if ctx ended first.
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) bool {
	select {
	case <-clk.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// backoff is an exponential backoff without jitter: the waits it spaces are
// one worker's own retries, not a herd.
type backoff struct {
	first, max, cur time.Duration
}

func newBackoff(first, maxWait time.Duration) *backoff { return &backoff{first: first, max: maxWait} }

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.first
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur
}

func (b *backoff) reset() { b.cur = 0 }
