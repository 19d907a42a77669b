package amqptest_test

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
)

// TestServerKeepsMessagesAcrossARestart: a test's own node takes a
// confirmed persistent message into a quorum queue, closes its clients'
// connections and refuses new ones while its application is stopped, and
// after StartApp still holds the message.
func TestServerKeepsMessagesAcrossARestart(t *testing.T) {
	t.Parallel()
	srv := amqptest.NewServer(t)
	require.NotEqual(t, amqptest.URL(), srv.URL())

	conn, err := amqp091.Dial(srv.URL())
	require.NoError(t, err)
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare("kept", true, false, false, false, amqp091.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	confirm, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "", "kept", true, false,
		amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("hello")})
	require.NoError(t, err)
	acked, err := confirm.WaitContext(t.Context())
	require.NoError(t, err)
	require.True(t, acked)

	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	srv.StopApp()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the connection stayed open after stop_app")
	}
	_, err = amqp091.Dial(srv.URL())
	require.Error(t, err, "a stopped node refuses connections")

	srv.StartApp()
	conn, err = amqp091.Dial(srv.URL())
	require.NoError(t, err)
	defer conn.Close()
	ch, err = conn.Channel()
	require.NoError(t, err)
	var msg amqp091.Delivery
	require.Eventually(t, func() bool {
		var ok bool
		msg, ok, err = ch.Get("kept", true)
		require.NoError(t, err)
		return ok
	}, 30*time.Second, 100*time.Millisecond, "the confirmed message is still in its queue")
	require.Equal(t, "hello", string(msg.Body))
}
