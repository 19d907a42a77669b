package broker

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
)

// newTestPublisher returns a Publisher for exchange via amqpURL, closed in
// t.Cleanup.
func newTestPublisher(t *testing.T, amqpURL, exchange string) *Publisher {
	t.Helper()
	pub, err := NewPublisher(PublisherOptions{
		Config:         TopicPublisherConfig(amqpURL, exchange, 4),
		RedialInterval: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	return pub
}

// subscribe subscribes with TopicSubscriberConfig and deletes the quorum
// queue and the exchange in t.Cleanup.
func subscribe(t *testing.T, exchange, queue, bindingKey string) <-chan *message.Message {
	t.Helper()
	sub, err := amqp.NewSubscriber(TopicSubscriberConfig(amqptest.URL(), exchange, queue, bindingKey, 4), WatermillLogger(nil))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		require.NoError(t, sub.Close())
		ch := amqptest.Channel(t)
		_, err := ch.QueueDelete(queue, false, false, false)
		require.NoError(t, err)
		require.NoError(t, ch.ExchangeDelete(exchange, false, false))
	})
	msgs, err := sub.Subscribe(ctx, queue)
	require.NoError(t, err)
	return msgs
}

func receive(t *testing.T, msgs <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m := <-msgs:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message within 10s")
		return nil
	}
}

func TestPublishSubscribeRoundTrip(t *testing.T) {
	t.Parallel()
	exchange := amqptest.UniqueName(t, "broker-test")
	queue := amqptest.UniqueName(t, "broker-test-q")
	msgs := subscribe(t, exchange, queue, "job.*") // declares queue and binding first
	pub := newTestPublisher(t, amqptest.URL(), exchange)

	skipped := message.NewMessage("skipped", []byte("not for job.*"))
	want := message.NewMessage("0190d6c8-6f1e-7c2a-9d51-3b8f2a4e6c10", []byte(`{"job":"j1"}`))
	want.Metadata.Set("x-tenant", "acme")
	// The unmatched message goes first: receiving the matched one next
	// shows the binding filtered it (one publisher channel keeps order).
	require.NoError(t, pub.Publish("dispatch.requested", skipped))
	require.NoError(t, pub.Publish("job.created", want))

	got := receive(t, msgs)
	require.Equal(t, want.UUID, got.UUID)
	require.Equal(t, string(want.Payload), string(got.Payload))
	require.Equal(t, "acme", got.Metadata.Get("x-tenant"))
	got.Ack()
}

func TestWatermillPublisherAcceptsTopicPublisherConfig(t *testing.T) {
	t.Parallel()
	// The config also drives watermill-amqp's own publisher, which some
	// callers may prefer where connection loss does not matter (tools).
	exchange := amqptest.UniqueName(t, "broker-test")
	queue := amqptest.DeclareTopicQueue(t, exchange, "job.#")
	pub, err := amqp.NewPublisher(TopicPublisherConfig(amqptest.URL(), exchange, 2), WatermillLogger(nil))
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })

	require.NoError(t, pub.Publish("job.created", message.NewMessage("wm-1", []byte("x"))))
	got := amqptest.Drain(t, queue)
	require.Len(t, got, 1)
	require.Equal(t, "wm-1", got[0].MessageId, "Marshaler sets the AMQP message-id")
	require.Equal(t, "job.created", got[0].RoutingKey)
	require.Equal(t, amqp091.Persistent, got[0].DeliveryMode)
}

func TestPublisherPublishesWithConfirms(t *testing.T) {
	t.Parallel()
	exchange := amqptest.UniqueName(t, "broker-test")
	queue := amqptest.DeclareTopicQueue(t, exchange, "#")
	pub := newTestPublisher(t, amqptest.URL(), exchange)

	// Concurrent publishers beyond the pool size all complete; after every
	// Publish returned (confirmed) the queue holds exactly the messages.
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			errs <- pub.Publish("job.updated", message.NewMessage(fmt.Sprintf("m-%d", i), []byte("p")))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	got := amqptest.Drain(t, queue)
	require.Len(t, got, n)
	for _, d := range got {
		require.Equal(t, d.MessageId, d.Headers[amqp.DefaultMessageUUIDHeaderKey])
		require.Equal(t, amqp091.Persistent, d.DeliveryMode)
	}

	require.NoError(t, pub.Publish("job.updated"), "no messages is a no-op")
}

func TestPublisherBrokerDownThenUp(t *testing.T) {
	t.Parallel()
	exchange := amqptest.UniqueName(t, "broker-test")
	queue := amqptest.DeclareTopicQueue(t, exchange, "#")
	proxy := amqptest.NewProxy(t, true)
	pub := newTestPublisher(t, proxy.URL(), exchange) // constructing does not dial

	require.Error(t, pub.Publish("job.created", message.NewMessage("m-0", nil)))

	proxy.Up()
	require.Eventually(t, func() bool {
		return pub.Publish("job.created", message.NewMessage("m-1", nil)) == nil
	}, 10*time.Second, 10*time.Millisecond)

	// Connection loss: publishes fail or succeed, and succeed again soon.
	proxy.Sever()
	require.Eventually(t, func() bool {
		return pub.Publish("job.created", message.NewMessage("m-2", nil)) == nil
	}, 10*time.Second, 10*time.Millisecond)

	ids := map[string]bool{}
	for _, d := range amqptest.Drain(t, queue) {
		ids[d.MessageId] = true
	}
	require.True(t, ids["m-1"])
	require.True(t, ids["m-2"])
	require.False(t, ids["m-0"])

	require.NoError(t, pub.Close())
	require.ErrorIs(t, pub.Publish("job.created", message.NewMessage("m-3", nil)), ErrPublisherClosed)
}

// TestPublisherCloseBrokerUnreachable: Close returns within CloseTimeout
// when the broker stops answering (it would wait for the close-ok until
// missed heartbeats revealed the dead connection).
func TestPublisherCloseBrokerUnreachable(t *testing.T) {
	t.Parallel()
	exchange := amqptest.UniqueName(t, "broker-test")
	amqptest.DeclareTopicQueue(t, exchange, "#")
	proxy := amqptest.NewProxy(t, false)
	pub := newTestPublisher(t, proxy.URL(), exchange)
	require.NoError(t, pub.Publish("job.created", message.NewMessage("m-0", nil)))

	proxy.Blackhole()
	t.Cleanup(proxy.Up)
	closed := make(chan error, 1)
	go func() { closed <- pub.Close() }()
	select {
	case err := <-closed:
		require.Error(t, err, "no close-ok came")
	case <-time.After(CloseTimeout + 10*time.Second):
		t.Fatal("Close waited for the unreachable broker")
	}
}

func TestPublisherHonorsMessageContext(t *testing.T) {
	t.Parallel()
	exchange := amqptest.UniqueName(t, "broker-test")
	queue := amqptest.DeclareTopicQueue(t, exchange, "#")
	pub := newTestPublisher(t, amqptest.URL(), exchange)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msg := message.NewMessage("canceled", nil)
	msg.SetContext(ctx)
	require.ErrorIs(t, pub.Publish("job.created", msg), context.Canceled)
	require.Empty(t, amqptest.Drain(t, queue), "nothing was sent")
}

func TestPublisherRedeclaresDeletedExchange(t *testing.T) {
	t.Parallel()
	exchange := amqptest.UniqueName(t, "broker-test")
	amqptest.DeclareTopicQueue(t, exchange, "#")
	pub := newTestPublisher(t, amqptest.URL(), exchange)
	require.NoError(t, pub.Publish("job.created", message.NewMessage("before", nil)))

	require.NoError(t, amqptest.Channel(t).ExchangeDelete(exchange, false, false))
	err := pub.Publish("job.created", message.NewMessage("during", nil))
	require.ErrorIs(t, err, ErrNotConfirmed, "the broker closed the channel: NOT_FOUND")
	require.NoError(t, pub.Publish("job.created", message.NewMessage("after", nil)))
}

func TestPublisherWithRoutedConfig(t *testing.T) {
	t.Parallel()
	// Exchange per topic (RoutedPublisherConfig): each exchange is declared
	// on first use, and "" means the default exchange.
	exA, exB := amqptest.UniqueName(t, "broker-test-a"), amqptest.UniqueName(t, "broker-test-b")
	qA, qB := amqptest.DeclareTopicQueue(t, exA, "#"), amqptest.DeclareTopicQueue(t, exB, "#")
	pub, err := NewPublisher(PublisherOptions{Config: RoutedPublisherConfig(amqptest.URL(), 2)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })

	require.NoError(t, pub.Publish(Route(exA, "dispatch.requested"), message.NewMessage("a", nil)))
	require.NoError(t, pub.Publish(Route(exB, "execution.missed"), message.NewMessage("b", nil)))
	require.NoError(t, pub.Publish(qA, message.NewMessage("direct", nil)), "default exchange, queue name as key")

	gotA, gotB := amqptest.Drain(t, qA), amqptest.Drain(t, qB)
	require.Len(t, gotA, 2)
	require.Equal(t, "dispatch.requested", gotA[0].RoutingKey)
	require.Equal(t, "direct", gotA[1].MessageId)
	require.Len(t, gotB, 1)
	require.Equal(t, exB, gotB[0].Exchange)
}

func TestNewPublisherValidates(t *testing.T) {
	t.Parallel()
	valid := TopicPublisherConfig("amqp://guest:guest@127.0.0.1:5672/", "ex", 0)
	tests := []struct {
		name   string
		mutate func(*PublisherOptions)
	}{
		{"empty URL", func(o *PublisherOptions) { o.Config.Connection.AmqpURI = "" }},
		{"no exchange generator", func(o *PublisherOptions) { o.Config.Exchange.GenerateName = nil }},
		{"no marshaler", func(o *PublisherOptions) { o.Config.Marshaler = nil }},
		{"transactional", func(o *PublisherOptions) { o.Config.Publish.Transactional = true }},
		{"mandatory", func(o *PublisherOptions) { o.Config.Publish.Mandatory = true }},
		{"negative pool", func(o *PublisherOptions) { o.Config.Publish.ChannelPoolSize = -1 }},
		{"negative redial", func(o *PublisherOptions) { o.RedialInterval = -time.Second }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := PublisherOptions{Config: TopicPublisherConfig("amqp://guest:guest@127.0.0.1:5672/", "ex", 0)}
			tt.mutate(&opts)
			_, err := NewPublisher(opts)
			require.Error(t, err)
		})
	}
	_, err := NewPublisher(PublisherOptions{Config: valid})
	require.NoError(t, err)
}

func TestConfigs(t *testing.T) {
	t.Parallel()
	pubCfg := TopicPublisherConfig("amqp://x/", "events", 0)
	require.NoError(t, pubCfg.ValidatePublisher())
	require.Equal(t, "events", pubCfg.Exchange.GenerateName("job.created"))
	require.Equal(t, "job.created", pubCfg.Publish.GenerateRoutingKey("job.created"))
	require.Equal(t, "topic", pubCfg.Exchange.Type)
	require.True(t, pubCfg.Exchange.Durable)
	require.True(t, pubCfg.Publish.ConfirmDelivery)
	require.Equal(t, DefaultChannelPoolSize, pubCfg.Publish.ChannelPoolSize)
	require.Equal(t, 3, TopicPublisherConfig("amqp://x/", "events", 3).Publish.ChannelPoolSize)

	subCfg := TopicSubscriberConfig("amqp://x/", "events", "trigger.jobs", "job.*", 0)
	require.NoError(t, subCfg.ValidateSubscriber())
	require.Equal(t, "events", subCfg.Exchange.GenerateName("anything"))
	require.Equal(t, "trigger.jobs", subCfg.Queue.GenerateName("anything"))
	require.Equal(t, "job.*", subCfg.QueueBind.GenerateRoutingKey("anything"))
	require.Equal(t, "quorum", subCfg.Queue.Arguments["x-queue-type"])
	require.True(t, subCfg.Queue.Durable)
	require.Equal(t, DefaultPrefetch, subCfg.Consume.Qos.PrefetchCount)
	require.Equal(t, 7, TopicSubscriberConfig("amqp://x/", "e", "q", "#", 7).Consume.Qos.PrefetchCount)
}

func TestMarshaler(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage("uuid-1", []byte("body"))
	msg.Metadata.Set("traceparent", "tp")
	p, err := Marshaler{}.Marshal(msg)
	require.NoError(t, err)
	require.Equal(t, "uuid-1", p.MessageId)
	require.Equal(t, amqp091.Persistent, p.DeliveryMode)

	// Published on from a redelivery, a message is a first delivery again.
	msg.Metadata.Set(RedeliveredHeader, "true")
	republished, err := Marshaler{}.Marshal(msg)
	require.NoError(t, err)
	require.NotContains(t, republished.Headers, RedeliveredHeader)
	delete(msg.Metadata, RedeliveredHeader)

	tests := []struct {
		name     string
		delivery amqp091.Delivery
		wantUUID string
		wantMeta message.Metadata
	}{
		{
			name:     "watermill message",
			delivery: amqp091.Delivery{Headers: p.Headers, MessageId: p.MessageId, Body: p.Body},
			wantUUID: "uuid-1",
			wantMeta: message.Metadata{"traceparent": "tp"},
		},
		{
			name: "quorum queue redelivery adds an integer header",
			delivery: amqp091.Delivery{Headers: amqp091.Table{
				amqp.DefaultMessageUUIDHeaderKey: "uuid-2", "x-delivery-count": int64(3),
			}},
			wantUUID: "uuid-2",
			wantMeta: message.Metadata{"x-delivery-count": "3"},
		},
		{
			name:     "the broker's redelivered flag becomes a header",
			delivery: amqp091.Delivery{MessageId: "m", Redelivered: true},
			wantUUID: "m",
			wantMeta: message.Metadata{RedeliveredHeader: "true"},
		},
		{
			name:     "only the broker's flag says redelivered",
			delivery: amqp091.Delivery{MessageId: "m", Headers: amqp091.Table{RedeliveredHeader: "true"}},
			wantUUID: "m",
			wantMeta: message.Metadata{},
		},
		{
			name:     "foreign message without headers takes the message-id",
			delivery: amqp091.Delivery{MessageId: "foreign-1"},
			wantUUID: "foreign-1",
			wantMeta: message.Metadata{},
		},
		{
			name: "time and bytes headers",
			delivery: amqp091.Delivery{MessageId: "m", Headers: amqp091.Table{
				"at": time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), "raw": []byte("b"), "nil": nil,
			}},
			wantUUID: "m",
			wantMeta: message.Metadata{"at": "2025-01-02T03:04:05Z", "raw": "b", "nil": ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Marshaler{}.Unmarshal(tt.delivery)
			require.NoError(t, err)
			require.Equal(t, tt.wantUUID, got.UUID)
			require.Equal(t, tt.wantMeta, got.Metadata)
		})
	}
}

func TestQuorumRedeliveryIsConsumable(t *testing.T) {
	t.Parallel()
	// A nacked message comes back from a quorum queue with an integer
	// x-delivery-count header; watermill-amqp's default marshaler would
	// reject it and requeue it forever.
	exchange := amqptest.UniqueName(t, "broker-test")
	queue := amqptest.UniqueName(t, "broker-test-q")
	msgs := subscribe(t, exchange, queue, "#")
	pub := newTestPublisher(t, amqptest.URL(), exchange)
	require.NoError(t, pub.Publish("job.created", message.NewMessage("redelivered", []byte("x"))))

	first := receive(t, msgs)
	first.Nack()
	second := receive(t, msgs)
	require.Equal(t, "redelivered", second.UUID)
	require.Equal(t, "1", second.Metadata.Get("x-delivery-count"))
	require.Empty(t, first.Metadata.Get(RedeliveredHeader), "a first delivery")
	require.Equal(t, "true", second.Metadata.Get(RedeliveredHeader))
	second.Ack()
}

func TestTraceRoundTripThroughBroker(t *testing.T) {
	t.Parallel()
	exchange := amqptest.UniqueName(t, "broker-test")
	queue := amqptest.UniqueName(t, "broker-test-q")
	msgs := subscribe(t, exchange, queue, "#")
	pub := newTestPublisher(t, amqptest.URL(), exchange)

	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "publish")
	defer span.End()

	msg := message.NewMessage("traced", nil)
	InjectTrace(ctx, nil, msg.Metadata)
	require.NotEmpty(t, msg.Metadata.Get("traceparent"))
	require.NoError(t, pub.Publish("job.created", msg))

	got := receive(t, msgs)
	got.Ack()
	sc := trace.SpanContextFromContext(ExtractTrace(context.Background(), propagation.TraceContext{}, got.Metadata))
	require.True(t, sc.IsValid())
	require.True(t, sc.IsRemote())
	require.Equal(t, span.SpanContext().TraceID(), sc.TraceID())
	require.Equal(t, span.SpanContext().SpanID(), sc.SpanID())
}

func TestTraceWithoutSpan(t *testing.T) {
	t.Parallel()
	md := message.Metadata{"other": "kept"}
	InjectTrace(context.Background(), nil, md)
	require.Equal(t, message.Metadata{"other": "kept"}, md, "no span, nothing injected")

	tests := []struct {
		name string
		md   message.Metadata
	}{
		{"empty", message.Metadata{}},
		{"malformed", message.Metadata{"traceparent": "garbage"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := ExtractTrace(context.Background(), nil, tt.md)
			require.False(t, trace.SpanContextFromContext(ctx).IsValid())
		})
	}
}

func TestWatermillLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := WatermillLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	l.Info("hello", watermill.LogFields{"k": "v"})
	l.With(watermill.LogFields{"w": 1}).Error("failed", fmt.Errorf("boom"), nil)
	require.Contains(t, buf.String(), "level=DEBUG msg=hello k=v", "Watermill's Info is our Debug")
	require.Contains(t, buf.String(), "level=ERROR msg=failed w=1 error=boom")

	WatermillLogger(nil).Info("discarded", nil) // must not panic
}

func TestPublishInOrderReportsTheConfirmedPrefix(t *testing.T) {
	t.Parallel()
	exA, exB := amqptest.UniqueName(t, "broker-test-a"), amqptest.UniqueName(t, "broker-test-b")
	qA, qB := amqptest.DeclareTopicQueue(t, exA, "#"), amqptest.DeclareTopicQueue(t, exB, "#")
	pub, err := NewPublisher(PublisherOptions{Config: RoutedPublisherConfig(amqptest.URL(), 1)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })

	topics := []string{Route(exA, "k.1"), Route(exB, "k.2"), Route(exA, "k.3")}
	msgs := []*message.Message{message.NewMessage("1", nil), message.NewMessage("2", nil), message.NewMessage("3", nil)}
	n, err := pub.PublishInOrder(topics, msgs)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	gotA := amqptest.Drain(t, qA)
	require.Len(t, gotA, 2)
	require.Equal(t, []string{"1", "3"}, []string{gotA[0].MessageId, gotA[1].MessageId}, "publish order kept")

	// exA disappears behind the publisher's back (its declaration is
	// cached): the broker closes the channel on the message to it, so that
	// message and everything after it fail and never arrive. The message
	// before it arrives, but its confirm may lose the race with the close:
	// the confirmed prefix is at most that one message.
	require.NoError(t, amqptest.Channel(t).ExchangeDelete(exA, false, false))
	msgs = []*message.Message{message.NewMessage("4", nil), message.NewMessage("5", nil), message.NewMessage("6", nil)}
	n, err = pub.PublishInOrder([]string{Route(exB, "k.4"), Route(exA, "k.5"), Route(exB, "k.6")}, msgs)
	require.Error(t, err)
	require.LessOrEqual(t, n, 1, "nothing after the failed message is confirmed")
	var idsB []string
	for _, d := range amqptest.Drain(t, qB) {
		idsB = append(idsB, d.MessageId)
	}
	require.Equal(t, []string{"2", "4"}, idsB, "the message after the failure never reaches the queue")

	// The next call declares exA again and succeeds.
	n, err = pub.PublishInOrder([]string{Route(exA, "k.7")}, []*message.Message{message.NewMessage("7", nil)})
	require.NoError(t, err)
	require.Equal(t, 1, n)
}
