package broker

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
)

// TestSubscribeAllDeclaresEachQueueAndConsumesOnEverySubscription
// subscribes 40 times to a queue that does not exist yet: the queue is
// declared and bound (the messages published to the exchange reach it),
// and every subscription consumes (each holds one message at a time, so
// 40 messages left unacknowledged are spread over all of them).
func TestSubscribeAllDeclaresEachQueueAndConsumesOnEverySubscription(t *testing.T) {
	ct := newConsumerTest(t)
	const n = 40
	cfg := TopicSubscriberConfig(amqptest.URL(), ct.exchange, ct.queue, "#", 1)
	topics := make([]string, n)
	for i := range topics {
		topics[i] = ct.queue
	}
	sub, channels, err := SubscribeAll(t.Context(), cfg, slog.New(slog.DiscardHandler), topics)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, CloseSubscriber(sub)) })
	require.Len(t, channels, n)

	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = strconv.Itoa(i)
	}
	ct.publish(t, bodies...)

	// Each subscription takes one message and holds it, unacknowledged:
	// all n arrive only if all n subscriptions consume.
	got := map[string]bool{}
	held := make([]*message.Message, 0, n)
	deadline := time.After(20 * time.Second)
	for i, ch := range channels {
		select {
		case m := <-ch:
			got[string(m.Payload)] = true
			held = append(held, m)
		case <-deadline:
			t.Fatalf("subscription %d received nothing; %d of %d messages arrived", i, len(got), n)
		}
	}
	assert.Len(t, got, n, "every message once")
	for _, m := range held {
		m.Ack()
	}
}

// TestSubscribeAllFailsWholeOnAConflictingQueue: a queue that exists with
// other arguments (a classic queue where the config declares a quorum
// one) fails the first subscription; SubscribeAll returns the error and
// closes what it opened.
func TestSubscribeAllFailsWholeOnAConflictingQueue(t *testing.T) {
	exchange := amqptest.UniqueName(t, "x")
	queue := amqptest.DeclareTopicQueueArgs(t, exchange, "#", amqp091.Table{"x-queue-type": "classic"})
	cfg := TopicSubscriberConfig(amqptest.URL(), exchange, queue, "#", 1)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sub, channels, err := SubscribeAll(ctx, cfg, slog.New(slog.DiscardHandler), []string{queue, queue, queue})
	require.Error(t, err)
	assert.ErrorContains(t, err, "subscribe to "+queue)
	assert.Nil(t, sub)
	assert.Nil(t, channels)
}
