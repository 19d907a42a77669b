package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
)

// consumerTest is a consumer of a queue of its own, and a way to publish to
// it.
type consumerTest struct {
	exchange, queue string
	publisher       *Publisher
}

func newConsumerTest(t *testing.T) consumerTest {
	t.Helper()
	ct := consumerTest{exchange: amqptest.UniqueName(t, "x"), queue: amqptest.UniqueName(t, "q")}
	ct.publisher = newTestPublisher(t, amqptest.URL(), ct.exchange)
	t.Cleanup(func() {
		ch := amqptest.Channel(t)
		_, err := ch.QueueDelete(ct.queue, false, false, false)
		require.NoError(t, err)
		require.NoError(t, ch.ExchangeDelete(ct.exchange, false, false))
	})
	return ct
}

func (ct consumerTest) options(url string, handle BatchHandler) ConsumerOptions {
	return ConsumerOptions{
		Name: "test", AMQPURL: url, Exchange: ct.exchange, Queue: ct.queue, BindingKey: "#",
		QueueArguments: map[string]any{"x-delivery-limit": NoDeliveryLimit},
		Handle:         handle, Subscriptions: 4, MaxBatch: 3,
		Linger: time.Millisecond, Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
	}
}

// run starts c and returns a stop that cancels it and waits for Run.
func run(t *testing.T, c *Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(20 * time.Second):
				t.Fatal("Run did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// traceID is the trace every test message is published in.
const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"

func (ct consumerTest) publish(t *testing.T, bodies ...string) {
	t.Helper()
	msgs := make([]*message.Message, len(bodies))
	for i, b := range bodies {
		msgs[i] = message.NewMessage(b, []byte(b))
		msgs[i].Metadata.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	}
	require.NoError(t, ct.publisher.Publish(ct.exchange, msgs...))
}

func waitReady(t *testing.T, c *Consumer) {
	t.Helper()
	select {
	case <-c.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("the consumer did not become ready")
	}
}

// bodies returns "0".."n-1".
func bodies(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

// queueDepth is how many messages wait in queue, unacknowledged ones not
// counted while their consumer holds them.
func queueDepth(t *testing.T, queue string) int {
	t.Helper()
	q, err := amqptest.Channel(t).QueueDeclarePassive(queue, true, false, false, false,
		amqp091.Table{"x-queue-type": "quorum", "x-delivery-limit": NoDeliveryLimit})
	require.NoError(t, err)
	return q.Messages
}

func TestConsumerHandlesEveryMessageOnceInBoundedBatches(t *testing.T) {
	t.Parallel()
	ct := newConsumerTest(t)
	var mu sync.Mutex
	seen := map[string]int{}
	all := make(chan struct{})
	const n = 40
	c, err := NewConsumer(ct.options(amqptest.URL(), func(_ context.Context, msgs []*message.Message) ([]error, error) {
		if len(msgs) > 3 {
			t.Errorf("a batch of %d, more than MaxBatch", len(msgs))
		}
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			if got := trace.SpanFromContext(m.Context()).SpanContext().TraceID().String(); got != traceID {
				t.Errorf("message %s: handled in trace %s, not its publisher's", m.Payload, got)
			}
			seen[string(m.Payload)]++
		}
		if len(seen) == n {
			close(all)
		}
		return nil, nil
	}))
	require.NoError(t, err)
	stop := run(t, c)
	waitReady(t, c)
	ct.publish(t, bodies(n)...)
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatal("not every message was handled")
	}
	stop()
	require.Len(t, seen, n)
	for b, k := range seen {
		require.Equal(t, 1, k, "message %s handled more than once", b)
	}
	require.Zero(t, queueDepth(t, ct.queue), "every message is acknowledged")
}

func TestConsumerRetriesWhatFailedAndDropsPoison(t *testing.T) {
	t.Parallel()
	ct := newConsumerTest(t)
	var mu sync.Mutex
	calls := map[string]int{}
	wholeBatchFailed := false
	settled := make(chan struct{})
	c, err := NewConsumer(ct.options(amqptest.URL(), func(_ context.Context, msgs []*message.Message) ([]error, error) {
		mu.Lock()
		defer mu.Unlock()
		if !wholeBatchFailed {
			wholeBatchFailed = true
			for _, m := range msgs {
				calls[string(m.Payload)]++
			}
			return nil, errors.New("the database is down")
		}
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			b := string(m.Payload)
			calls[b]++
			switch {
			case b == "poison":
				errs[i] = fmt.Errorf("decode: %w", ErrPoison)
			case b == "flaky" && calls[b] < 3:
				errs[i] = errors.New("a conflict, worth a retry")
			}
		}
		if calls["flaky"] >= 3 && calls["poison"] >= 1 && calls["ok"] >= 1 {
			select {
			case <-settled:
			default:
				close(settled)
			}
		}
		return errs, nil
	}))
	require.NoError(t, err)
	stop := run(t, c)
	waitReady(t, c)
	ct.publish(t, "ok", "poison", "flaky")
	select {
	case <-settled:
	case <-time.After(30 * time.Second):
		t.Fatal("the messages were not settled")
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 3, calls["flaky"], "a failed message is retried until it succeeds, then not again")
	require.LessOrEqual(t, calls["poison"], 2, "a poison message is dropped, not retried")
	require.LessOrEqual(t, calls["ok"], 2, "a handled message is not handled again")
	require.Zero(t, queueDepth(t, ct.queue), "the poison message is acknowledged too")
}

// TestConsumerRequeuesWhatItHoldsAtShutdown: a message whose handling
// keeps failing is held through the backoffs; when the consumer stops it
// goes back to the queue for the next consumer, not lost, not acked.
func TestConsumerRequeuesWhatItHoldsAtShutdown(t *testing.T) {
	t.Parallel()
	ct := newConsumerTest(t)
	tried := make(chan struct{}, 1)
	c, err := NewConsumer(ct.options(amqptest.URL(), func(context.Context, []*message.Message) ([]error, error) {
		select {
		case tried <- struct{}{}:
		default:
		}
		return nil, errors.New("the database is down")
	}))
	require.NoError(t, err)
	stop := run(t, c)
	waitReady(t, c)
	ct.publish(t, "held")
	select {
	case <-tried:
	case <-time.After(30 * time.Second):
		t.Fatal("the message was not handled")
	}
	stop()
	require.Eventually(t, func() bool { return queueDepth(t, ct.queue) == 1 }, 10*time.Second, 20*time.Millisecond,
		"the held message is back in the queue")
}

// TestConsumerWaitsForTheBroker: started while the broker is unreachable, a
// consumer keeps trying, becomes ready once the broker answers, and stops
// promptly while it is still unreachable.
func TestConsumerWaitsForTheBroker(t *testing.T) {
	t.Parallel()
	ct := newConsumerTest(t)
	proxy := amqptest.NewProxy(t, true)
	handled := make(chan string, 1)
	c, err := NewConsumer(ct.options(proxy.URL(), func(_ context.Context, msgs []*message.Message) ([]error, error) {
		for _, m := range msgs {
			handled <- string(m.Payload)
		}
		return nil, nil
	}))
	require.NoError(t, err)
	stop := run(t, c)
	select {
	case <-c.Ready():
		t.Fatal("ready while the broker is unreachable")
	case <-time.After(300 * time.Millisecond):
	}
	proxy.Up()
	waitReady(t, c)
	ct.publish(t, "after the outage")
	select {
	case b := <-handled:
		require.Equal(t, "after the outage", b)
	case <-time.After(30 * time.Second):
		t.Fatal("nothing handled after the broker came back")
	}
	stop()

	down, err := NewConsumer(ct.options(amqptest.NewProxy(t, true).URL(), func(context.Context, []*message.Message) ([]error, error) {
		return nil, nil
	}))
	require.NoError(t, err)
	run(t, down)() // returns although it never reached the broker
}

func TestNewConsumerValidates(t *testing.T) {
	t.Parallel()
	ok := ConsumerOptions{AMQPURL: "amqp://x", Exchange: "x", Queue: "q", BindingKey: "#",
		Handle: func(context.Context, []*message.Message) ([]error, error) { return nil, nil }}
	for name, mutate := range map[string]func(*ConsumerOptions){
		"no handler":        func(o *ConsumerOptions) { o.Handle = nil },
		"no queue":          func(o *ConsumerOptions) { o.Queue = "" },
		"negative batch":    func(o *ConsumerOptions) { o.MaxBatch = -1 },
		"negative backoff":  func(o *ConsumerOptions) { o.Backoff = -time.Second },
		"no binding key":    func(o *ConsumerOptions) { o.BindingKey = "" },
		"no broker address": func(o *ConsumerOptions) { o.AMQPURL = "" },
	} {
		o := ok
		mutate(&o)
		_, err := NewConsumer(o)
		require.Error(t, err, name)
	}
	c, err := NewConsumer(ok)
	require.NoError(t, err)
	require.Equal(t, DefaultSubscriptions, c.opts.Subscriptions)
	require.Equal(t, DefaultSubscriptions, c.opts.MaxBatch, "a batch holds at most the messages in hand")
}

// TestConsumerRemovesFormerBindings: a queue an earlier version bound with
// another key stops receiving that key's messages once the consumer has
// subscribed, and a former key that was never bound is no error.
func TestConsumerRemovesFormerBindings(t *testing.T) {
	t.Parallel()
	ct := newConsumerTest(t)
	args := map[string]any{"x-delivery-limit": NoDeliveryLimit}
	require.NoError(t, declareQueues(amqptest.URL(), []QueueBinding{{Exchange: ct.exchange, Queue: ct.queue, BindingKey: "former", Arguments: args}}))
	var mu sync.Mutex
	var seen []string
	handled := make(chan struct{}, 1)
	opts := ct.options(amqptest.URL(), func(_ context.Context, msgs []*message.Message) ([]error, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			seen = append(seen, string(m.Payload))
		}
		select {
		case handled <- struct{}{}:
		default:
		}
		return nil, nil
	})
	opts.BindingKey, opts.FormerBindingKeys = "current", []string{"never-bound", "former"}
	c, err := NewConsumer(opts)
	require.NoError(t, err)
	stop := run(t, c)
	waitReady(t, c)
	// Published one after the other on one channel: were "former" still
	// bound, it would be queued ahead of "current".
	require.NoError(t, ct.publisher.Publish("former", message.NewMessage("former", []byte("former"))))
	require.NoError(t, ct.publisher.Publish("current", message.NewMessage("current", []byte("current"))))
	select {
	case <-handled:
	case <-time.After(30 * time.Second):
		t.Fatal("the current key's message was not handled")
	}
	stop()
	require.Equal(t, []string{"current"}, seen)
	require.Zero(t, queueDepth(t, ct.queue), "nothing else was routed to the queue")
}
