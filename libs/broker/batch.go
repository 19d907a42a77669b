package broker

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/cronmesh/cronmesh/libs/clock"
)

// FanIn merges the messages of several subscriptions into one unbuffered
// channel. A message that arrives after ctx ended is nacked, for whichever
// consumer runs next, instead of waiting for a reader that has stopped.
// wait returns once every channel in channels is closed (watermill-amqp
// closes them when its subscription's context ends or the subscriber is
// closed) or ctx is done (see Next).
func FanIn(ctx context.Context, channels []<-chan *message.Message) (in <-chan *message.Message, wait func()) {
	merged := make(chan *message.Message)
	var wg sync.WaitGroup
	for _, ch := range channels {
		wg.Go(func() {
			for {
				msg, ok := Next(ctx, ch)
				if !ok {
					return
				}
				select {
				case merged <- msg:
				case <-ctx.Done():
					msg.Nack()
				}
			}
		})
	}
	return merged, wg.Wait
}

// Next returns the next message of a subscription's channel, or false once
// the channel is closed or ctx is done. A consumer that is stopping must
// not wait for the channel to close: watermill-amqp closes it only after
// closing its AMQP channel, a round trip to the broker that an unreachable
// broker never answers. A message received after ctx ended is nacked, for
// whichever consumer runs next; one left unread is requeued by the broker
// when the connection closes.
func Next(ctx context.Context, ch <-chan *message.Message) (*message.Message, bool) {
	select {
	case <-ctx.Done():
		return nil, false
	case msg, ok := <-ch:
		if ok && ctx.Err() != nil {
			msg.Nack()
			return nil, false
		}
		return msg, ok
	}
}

// gather returns first and the messages that follow it, up to MaxBatch:
// those at hand, then those arriving within linger. It stops early when
// ctx ends; what it gathered is still handled.
func gather(ctx context.Context, in <-chan *message.Message, first *message.Message,
	maxBatch int, linger time.Duration, clk clock.Clock) []*message.Message {
	msgs := []*message.Message{first}
atHand:
	for len(msgs) < maxBatch {
		select {
		case msg := <-in:
			msgs = append(msgs, msg)
		default:
			break atHand
		}
	}
	if len(msgs) == maxBatch {
		return msgs
	}
	lingered := clk.After(linger)
	for len(msgs) < maxBatch {
		select {
		case msg := <-in:
			msgs = append(msgs, msg)
		case <-lingered:
			return msgs
		case <-ctx.Done():
			return msgs
		}
	}
	return msgs
}
