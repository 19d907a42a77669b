package broker

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
)

func TestPackUnpackThroughTheBroker(t *testing.T) {
	t.Parallel()
	exchange, queue := amqptest.UniqueName(t, "x"), amqptest.UniqueName(t, "q")
	received := subscribe(t, exchange, queue, "dispatch.#")
	pub := newTestPublisher(t, amqptest.URL(), exchange)

	a := message.NewMessage("11111111-1111-1111-1111-111111111111", []byte("first"))
	a.Metadata.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	a.Metadata.Set(RedeliveredHeader, "true")                                        // the packer's own word does not count
	b := message.NewMessage("22222222-2222-2222-2222-222222222222", []byte{0, 1, 2}) // binary, a NUL included
	packed, err := Pack([]*message.Message{a, b})
	require.NoError(t, err)
	require.True(t, IsBatch(packed))
	require.NotEqual(t, a.UUID, packed.UUID)
	require.NoError(t, pub.Publish("dispatch.normal", packed))

	got := receive(t, received)
	require.True(t, IsBatch(got))
	require.Equal(t, "2", got.Metadata.Get(BatchHeader))
	msgs, err := Unpack(got)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	require.Equal(t, a.UUID, msgs[0].UUID)
	require.Equal(t, "first", string(msgs[0].Payload))
	require.Equal(t, a.Metadata.Get("traceparent"), msgs[0].Metadata.Get("traceparent"))
	require.Empty(t, msgs[0].Metadata.Get(RedeliveredHeader), "only the broker's delivery says redelivered")
	require.Equal(t, b.UUID, msgs[1].UUID)
	require.Equal(t, message.Payload{0, 1, 2}, msgs[1].Payload)

	// Returned unacknowledged, the batch comes back flagged, and so does
	// every message in it.
	got.Nack()
	again := receive(t, received)
	msgs, err = Unpack(again)
	require.NoError(t, err)
	for _, m := range msgs {
		require.Equal(t, "true", m.Metadata.Get(RedeliveredHeader), m.UUID)
		require.NotEmpty(t, m.Metadata.Get(DeliveryCountHeader), m.UUID)
	}
	again.Ack()
}

func TestUnpackRefusesWhatIsNotABatch(t *testing.T) {
	t.Parallel()
	_, err := Pack(nil)
	require.Error(t, err)
	for name, body := range map[string][]byte{"garbage": []byte("\xff\xff not protobuf"), "empty": nil} {
		msg := message.NewMessage("m", body)
		msg.Metadata.Set(BatchHeader, "1")
		msg.SetContext(context.Background())
		_, err := Unpack(msg)
		require.Error(t, err, name)
	}
	require.False(t, IsBatch(message.NewMessage("m", nil)))
}
