package broker

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

// TestNextDoesNotWaitForTheChannelToClose: once ctx is done, Next returns
// at once although the subscription's channel stays open (watermill-amqp
// closes it only after a round trip to the broker), and FanIn's wait
// returns too; a message taken after ctx ended is nacked.
func TestNextDoesNotWaitForTheChannelToClose(t *testing.T) {
	t.Parallel()
	open := make(chan *message.Message) // never closed
	ctx, cancel := context.WithCancel(t.Context())
	msg := message.NewMessage("m-1", nil)
	got := make(chan *message.Message, 1)
	go func() {
		m, _ := Next(ctx, open)
		got <- m
	}()
	open <- msg
	require.Same(t, msg, <-got)

	_, wait := FanIn(ctx, []<-chan *message.Message{open})
	cancel()
	m, ok := Next(ctx, open)
	require.False(t, ok)
	require.Nil(t, m)
	wait() // returns: the forwarder stopped with ctx

	buffered := make(chan *message.Message, 1)
	late := message.NewMessage("m-2", nil)
	buffered <- late
	for { // select picks at random between the ready cases
		if _, ok := Next(ctx, buffered); !ok && len(buffered) == 0 {
			break
		}
	}
	select {
	case <-late.Nacked():
	default:
		t.Fatal("a message taken after ctx ended was not nacked")
	}
}
