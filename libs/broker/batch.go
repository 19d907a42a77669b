package broker

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/cronmesh/cronmesh/libs/clock"
)

// BatchOptions configure ConsumeBatches. Every field is required (callers
// apply their own defaults).
type BatchOptions struct {
	// Loops is how many batches are handled at once.
	Loops int
	// MaxBatch caps a batch; Linger is how long a batch that is not full
	// waits for more messages once those at hand are taken.
	MaxBatch int
	Linger   time.Duration
	// Backoff is the first pause before the messages of a failed batch
	// are requeued; it doubles up to MaxBackoff and resets after a batch
	// that needed no requeue.
	Backoff, MaxBackoff time.Duration
	// Clock times the linger and the backoff.
	Clock clock.Clock
}

// ConsumeBatches applies work in batches to the messages of several
// Watermill subscriptions. watermill-amqp hands a subscription's next
// message over only after the previous one is acknowledged, so one
// subscription cannot fill a batch: the caller subscribes as many times as
// it wants messages in hand, and ConsumeBatches fans them in to
// opts.Loops loops, each gathering up to MaxBatch messages (those at hand,
// then those arriving within Linger) and calling handle with them.
//
// handle acknowledges what it handled and returns the messages to requeue;
// the loop holds those through the backoff (so it pauses rather than spin
// on redeliveries while a dependency is unwell) and then nacks them. A
// batch is handled to its end even if ctx ends meanwhile (handle decides
// how long it may take). ConsumeBatches returns once ctx is done, without
// waiting for the subscriptions' channels to close (see Next); a message
// taken after ctx ended is nacked unhandled, for whichever consumer runs
// next.
func ConsumeBatches(ctx context.Context, channels []<-chan *message.Message, opts BatchOptions,
	handle func(context.Context, []*message.Message) (requeue []*message.Message)) {
	in, fannedIn := FanIn(ctx, channels)
	var loops sync.WaitGroup
	for range opts.Loops {
		loops.Go(func() { batchLoop(ctx, in, opts, handle) })
	}
	loops.Wait()
	fannedIn()
}

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

// batchLoop gathers batches from in and handles them until ctx is done.
func batchLoop(ctx context.Context, in <-chan *message.Message, opts BatchOptions,
	handle func(context.Context, []*message.Message) []*message.Message) {
	wait := time.Duration(0)
	for {
		var first *message.Message
		select {
		case <-ctx.Done():
			return
		case first = <-in:
		}
		requeue := handle(ctx, gather(ctx, in, first, opts))
		if len(requeue) == 0 {
			wait = 0
			continue
		}
		wait = min(max(2*wait, opts.Backoff), opts.MaxBackoff)
		select {
		case <-ctx.Done():
		case <-opts.Clock.After(wait):
		}
		for _, msg := range requeue {
			msg.Nack()
		}
	}
}

// gather returns first and the messages that follow it, up to MaxBatch:
// those at hand, then those arriving within Linger. It stops early when
// ctx ends; what it gathered is still handled.
func gather(ctx context.Context, in <-chan *message.Message, first *message.Message, opts BatchOptions) []*message.Message {
	msgs := []*message.Message{first}
atHand:
	for len(msgs) < opts.MaxBatch {
		select {
		case msg := <-in:
			msgs = append(msgs, msg)
		default:
			break atHand
		}
	}
	if len(msgs) == opts.MaxBatch {
		return msgs
	}
	linger := opts.Clock.After(opts.Linger)
	for len(msgs) < opts.MaxBatch {
		select {
		case msg := <-in:
			msgs = append(msgs, msg)
		case <-linger:
			return msgs
		case <-ctx.Done():
			return msgs
		}
	}
	return msgs
}
