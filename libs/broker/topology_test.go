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

func TestDeclareQueuesRoutesAndIsIdempotent(t *testing.T) {
	t.Parallel()
	exchange := amqptest.UniqueName(t, "x")
	queue := amqptest.UniqueName(t, "q")
	ch := amqptest.Channel(t)
	t.Cleanup(func() {
		ch := amqptest.Channel(t)
		_, _ = ch.QueueDelete(queue, false, false, false)
		_ = ch.ExchangeDelete(exchange, false, false)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	binding := broker.QueueBinding{Exchange: exchange, Queue: queue, BindingKey: "dispatch.#"}
	require.NoError(t, broker.DeclareQueues(ctx, amqptest.URL(), binding))
	require.NoError(t, broker.DeclareQueues(ctx, amqptest.URL(), binding), "declaring twice is fine")

	for _, key := range []string{"dispatch.high", "other.key"} {
		require.NoError(t, ch.PublishWithContext(ctx, exchange, key, false, false, amqp091.Publishing{Body: []byte(key)}))
	}
	got := amqptest.Consume(t, queue, 1, 5*time.Second)
	require.Equal(t, "dispatch.high", string(got[0].Body))
	require.Empty(t, amqptest.Drain(t, queue), "only the bound key is routed")
}

func TestDeclareQueuesGivesUpWhenCancelled(t *testing.T) {
	t.Parallel()
	proxy := amqptest.NewProxy(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := broker.DeclareQueues(ctx, proxy.URL(), broker.QueueBinding{Exchange: "x", Queue: "q", BindingKey: "#"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
