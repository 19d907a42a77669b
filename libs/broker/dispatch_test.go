package broker_test

import (
	"context"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
)

// TestRetryTierReturnsToItsPriorityQueue: a request parked in a delay tier
// comes back to the dispatch queue of its own priority once the tier's TTL
// expires, and not before.
func TestRetryTierReturnsToItsPriorityQueue(t *testing.T) {
	t.Parallel()
	dispatchX, retryX := amqptest.UniqueName(t, "dispatch"), amqptest.UniqueName(t, "retry")
	queuePrefix, tierPrefix := amqptest.UniqueName(t, "dq"), amqptest.UniqueName(t, "tier")
	tiers := []time.Duration{300 * time.Millisecond, time.Hour}
	bindings := append(broker.DispatchQueues(dispatchX, queuePrefix), broker.RetryTiers(retryX, tierPrefix, dispatchX, tiers)...)
	t.Cleanup(func() {
		ch := amqptest.Channel(t)
		for _, b := range bindings {
			_, _ = ch.QueueDelete(b.Queue, false, false, false)
		}
		_ = ch.ExchangeDelete(dispatchX, false, false)
		_ = ch.ExchangeDelete(retryX, false, false)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, broker.DeclareQueues(ctx, amqptest.URL(), bindings...))
	require.NoError(t, broker.DeclareQueues(ctx, amqptest.URL(), bindings...), "redeclaring with the same arguments is fine")

	ch := amqptest.Channel(t)
	sent := time.Now()
	require.NoError(t, ch.PublishWithContext(ctx, retryX, broker.RetryRoutingKey(tiers[0], "high"), false, false, amqp091.Publishing{Body: []byte("retry me")}))
	require.NoError(t, ch.PublishWithContext(ctx, retryX, broker.RetryRoutingKey(tiers[1], "low"), false, false, amqp091.Publishing{Body: []byte("much later")}))
	require.NoError(t, ch.PublishWithContext(ctx, dispatchX, broker.DispatchRoutingKey("normal"), false, false, amqp091.Publishing{Body: []byte("fresh")}))

	fresh := amqptest.Consume(t, broker.DispatchQueue(queuePrefix, "normal"), 1, 5*time.Second)
	require.Equal(t, "fresh", string(fresh[0].Body))
	back := amqptest.Consume(t, broker.DispatchQueue(queuePrefix, "high"), 1, 5*time.Second)
	require.Equal(t, "retry me", string(back[0].Body))
	require.GreaterOrEqual(t, time.Since(sent), tiers[0], "not before the tier's delay")
	require.Empty(t, amqptest.Drain(t, broker.DispatchQueue(queuePrefix, "low")), "the one-hour tier still holds its message")
}
