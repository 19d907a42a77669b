package broker

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/clock"
)

func batchOptions() BatchOptions {
	return BatchOptions{Loops: 2, MaxBatch: 3, Linger: time.Millisecond, Backoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond, Clock: clock.Real{}}
}

// subscriptions returns n channels holding msgs between them, closed.
func subscriptions(n int, msgs []*message.Message) []<-chan *message.Message {
	chans := make([]chan *message.Message, n)
	for i := range chans {
		chans[i] = make(chan *message.Message, len(msgs))
	}
	for i, m := range msgs {
		chans[i%n] <- m
	}
	out := make([]<-chan *message.Message, n)
	for i, ch := range chans {
		close(ch)
		out[i] = ch
	}
	return out
}

func messages(n int) []*message.Message {
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(strconv.Itoa(i), nil)
	}
	return msgs
}

func TestConsumeBatchesHandlesEveryMessageOnceInBoundedBatches(t *testing.T) {
	t.Parallel()
	msgs := messages(20)
	var mu sync.Mutex
	seen := map[string]int{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		ConsumeBatches(ctx, subscriptions(4, msgs), batchOptions(), func(_ context.Context, batch []*message.Message) []*message.Message {
			if len(batch) > 3 {
				t.Errorf("a batch of %d, more than MaxBatch", len(batch))
			}
			mu.Lock()
			defer mu.Unlock()
			for _, m := range batch {
				seen[m.UUID]++
				m.Ack()
			}
			if len(seen) == len(msgs) {
				cancel()
			}
			return nil
		})
		close(done)
	}()
	<-done
	require.Len(t, seen, len(msgs))
	for id, n := range seen {
		require.Equal(t, 1, n, "message %s", id)
	}
}

func TestConsumeBatchesNacksWhatTheHandlerRequeues(t *testing.T) {
	t.Parallel()
	msgs := messages(5)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go ConsumeBatches(ctx, subscriptions(1, msgs), batchOptions(), func(_ context.Context, batch []*message.Message) []*message.Message {
		var requeue []*message.Message
		for _, m := range batch {
			if m.UUID == "2" {
				requeue = append(requeue, m)
			} else {
				m.Ack()
			}
		}
		return requeue
	})
	for _, m := range msgs {
		want := m.Acked()
		if m.UUID == "2" {
			want = m.Nacked()
		}
		select {
		case <-want:
		case <-time.After(10 * time.Second):
			t.Fatalf("message %s neither acked nor nacked as the handler said", m.UUID)
		}
	}
}

// TestConsumeBatchesStopsAtTheEnd: once ctx is done nothing more is
// handled, and ConsumeBatches returns without waiting for the channels to
// close (watermill-amqp closes them only after a round trip to the broker);
// a message taken meanwhile is nacked, one never taken is requeued by the
// broker when the connection closes.
func TestConsumeBatchesStopsAtTheEnd(t *testing.T) {
	t.Parallel()
	msgs := messages(3)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	open := make(chan *message.Message, len(msgs)) // never closed
	for _, m := range msgs {
		open <- m
	}
	opts := batchOptions()
	opts.Loops = 0 // nothing takes messages: only the shutdown path can settle them
	ConsumeBatches(ctx, []<-chan *message.Message{open}, opts, func(context.Context, []*message.Message) []*message.Message {
		t.Error("no batch is handled after the end")
		return nil
	})
	for _, m := range msgs {
		select {
		case <-m.Acked():
			t.Fatalf("message %s acked after the end", m.UUID)
		default:
		}
	}
}

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
