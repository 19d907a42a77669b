package amqptest

import (
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

func TestURL(t *testing.T) {
	t.Parallel()
	want := DefaultURL
	if v := os.Getenv(URLEnv); v != "" {
		want = v
	}
	require.Equal(t, want, URL())
}

func TestUniqueName(t *testing.T) {
	t.Parallel()
	a, b := UniqueName(t, "x-y.z"), UniqueName(t, "x-y.z")
	require.NotEqual(t, a, b)
	require.Regexp(t, regexp.MustCompile(`^x-y\.z\.[0-9a-f]{16}$`), a)
}

func publish(t *testing.T, exchange, key string, bodies ...string) {
	t.Helper()
	ch := Channel(t)
	require.NoError(t, ch.Confirm(false))
	for _, b := range bodies {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), exchange, key, false, false,
			amqp091.Publishing{Body: []byte(b)})
		require.NoError(t, err)
		require.True(t, dc.Wait())
	}
}

func TestDeclareTopicQueueConsumeDrain(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args amqp091.Table
	}{
		{"classic", nil},
		{"quorum", amqp091.Table{"x-queue-type": "quorum"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			exchange := UniqueName(t, "amqptest")
			queue := DeclareTopicQueueArgs(t, exchange, "job.*", tt.args)

			publish(t, exchange, "job.created", "1", "2", "3", "4")
			publish(t, exchange, "other.created", "unrouted")

			got := Consume(t, queue, 2, 10*time.Second)
			require.Equal(t, "1", string(got[0].Body))
			require.Equal(t, "2", string(got[1].Body))

			// Consume left the rest in the queue; Drain takes them in order.
			var rest []string
			require.Eventually(t, func() bool {
				for _, d := range Drain(t, queue) {
					rest = append(rest, string(d.Body))
				}
				return len(rest) >= 2
			}, 10*time.Second, 10*time.Millisecond)
			require.Equal(t, []string{"3", "4"}, rest)
			require.Empty(t, Drain(t, queue))
		})
	}
}

func TestDeclareTopicQueueCleansUp(t *testing.T) {
	t.Parallel()
	exchange := UniqueName(t, "amqptest")
	var queue string
	t.Run("declare", func(t *testing.T) {
		queue = DeclareTopicQueue(t, exchange, "#")
	})
	// The subtest's cleanup ran: passive declares fail with 404.
	conn := Dial(t)
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.Error(t, err)
	ch, err = conn.Channel()
	require.NoError(t, err)
	require.Error(t, ch.ExchangeDeclarePassive(exchange, "topic", true, false, false, false, nil))
}

func TestProxy(t *testing.T) {
	t.Parallel()
	p := NewProxy(t, true)
	dial := func() (*amqp091.Connection, error) {
		return amqp091.DialConfig(p.URL(), amqp091.Config{Dial: amqp091.DefaultDial(2 * time.Second), Locale: "en_US"})
	}

	_, err := dial()
	require.Error(t, err, "down refuses")

	p.Up()
	conn, err := dial()
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))

	p.Sever()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("severed connection not noticed")
	}
	conn2, err := dial()
	require.NoError(t, err, "sever keeps accepting")
	require.NoError(t, conn2.Close())

	p.Down()
	_, err = dial()
	require.Error(t, err)
}
