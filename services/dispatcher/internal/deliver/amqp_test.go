package deliver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
)

const amqpWait = 10 * time.Second

func amqpRequest(exchange, key string, mod func(*registryv1.AmqpTarget)) *dispatchv1.DispatchRequest {
	target := &registryv1.AmqpTarget{
		Exchange:   exchange,
		RoutingKey: key,
		Body:       `{"report":"nightly"}`,
		Headers:    map[string]string{"x-tenant": "alpha"},
	}
	if mod != nil {
		mod(target)
	}
	return &dispatchv1.DispatchRequest{
		ExecutionId: testExecutionID,
		JobId:       "0195b9a4-0000-7000-8000-000000000002",
		Namespace:   "deliver", // the test exchanges are amqptest.UniqueName(t, "deliver")
		Attempt:     2,
		Target:      &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: target}},
	}
}

// newAMQPClient is a Client whose publisher talks to the test RabbitMQ at
// amqpURL, built as the dispatcher builds it.
func newAMQPClient(t *testing.T, amqpURL string, mod func(*Options)) *Client {
	t.Helper()
	pub, err := broker.NewPublisher(broker.PublisherOptions{Config: PublisherConfig(amqpURL, 0)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	c, _ := newTestClient(t, func(o *Options) {
		o.Publisher = pub
		if mod != nil {
			mod(o)
		}
	})
	return c
}

func TestAMQPPublish(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		contentType     string
		wantContentType string
	}{
		{"default content type", "", "application/json"},
		{"job's content type", "text/csv", "text/csv"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			exchange := amqptest.UniqueName(t, "deliver")
			queue := amqptest.DeclareTopicQueue(t, exchange, "reports.#")
			c := newAMQPClient(t, amqptest.URL(), func(o *Options) { o.TracerProvider = tp })

			ctx, parent := tp.Tracer("test").Start(context.Background(), "consume")
			out := deliverNow(c, ctx, amqpRequest(exchange, "reports.nightly", func(a *registryv1.AmqpTarget) {
				a.ContentType = tt.contentType
				a.SecretHeaders = map[string]string{"x-token": "tok-s3cret"}
			}))
			parent.End()
			require.Equal(t, Succeeded, out.Result, out.Reason)
			require.Empty(t, out.Reason)
			require.Positive(t, out.Duration)

			got := amqptest.Consume(t, queue, 1, amqpWait)[0]
			require.Equal(t, testExecutionID, got.MessageId)
			require.Equal(t, `{"report":"nightly"}`, string(got.Body))
			require.Equal(t, "reports.nightly", got.RoutingKey)
			require.Equal(t, tt.wantContentType, got.ContentType)
			require.Equal(t, amqp091.Persistent, got.DeliveryMode)
			require.Equal(t, "alpha", got.Headers["x-tenant"])
			require.Equal(t, "tok-s3cret", got.Headers["x-token"], "secret headers are published like the others")
			require.NotContains(t, got.Headers, metadataContentType)

			var producer sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if s.SpanKind() == trace.SpanKindProducer {
					producer = s
				}
			}
			require.NotNil(t, producer)
			require.Equal(t, "publish "+exchange, producer.Name())
			for _, kv := range producer.Attributes() {
				require.NotContains(t, kv.Value.String(), "tok-s3cret", kv.Key)
			}
			require.Equal(t, parent.SpanContext().SpanID(), producer.Parent().SpanID())
			require.Equal(t, fmt.Sprintf("00-%s-%s-01", producer.SpanContext().TraceID(), producer.SpanContext().SpanID()),
				got.Headers["traceparent"])
		})
	}
}

func TestAMQPDefaultExchange(t *testing.T) {
	t.Parallel()
	// The default exchange routes by queue name; the publisher does not
	// declare it.
	queue := amqptest.DeclareTopicQueue(t, amqptest.UniqueName(t, "deliver"), "unused")
	c := newAMQPClient(t, amqptest.URL(), nil)
	req := amqpRequest("", queue, nil)
	req.Namespace = "q" // amqptest's queues are named "q.<random>"
	out := deliverNow(c, context.Background(), req)
	require.Equal(t, Succeeded, out.Result, out.Reason)
	got := amqptest.Consume(t, queue, 1, amqpWait)[0]
	require.Equal(t, testExecutionID, got.MessageId)
	require.Equal(t, `{"report":"nightly"}`, string(got.Body))
}

func TestAMQPExchangeOfAnotherType(t *testing.T) {
	t.Parallel()
	// A fanout exchange: declaring it as a topic exchange (what
	// broker.RoutedPublisherConfig does) would fail with 406; the passive
	// check uses it as it is.
	exchange := amqptest.UniqueName(t, "deliver")
	ch := amqptest.Channel(t)
	require.NoError(t, ch.ExchangeDeclare(exchange, "fanout", false, true, false, false, nil))
	q, err := ch.QueueDeclare("", false, true, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, "", exchange, false, nil))
	t.Cleanup(func() { _ = amqptest.Channel(t).ExchangeDelete(exchange, false, false) })

	c := newAMQPClient(t, amqptest.URL(), nil)
	out := deliverNow(c, context.Background(), amqpRequest(exchange, "any.key", nil))
	require.Equal(t, Succeeded, out.Result, out.Reason)
	require.Eventually(t, func() bool {
		q, err := ch.QueueDeclarePassive(q.Name, false, true, false, false, nil)
		return err == nil && q.Messages == 1
	}, amqpWait, 10*time.Millisecond)
}

func TestAMQPMissingExchange(t *testing.T) {
	t.Parallel()
	exchange := amqptest.UniqueName(t, "deliver.missing")
	c := newAMQPClient(t, amqptest.URL(), nil)
	for range 2 { // and again on the same connection
		out := deliverNow(c, context.Background(), amqpRequest(exchange, "k", nil))
		require.Equal(t, Permanent, out.Result)
		require.Equal(t, fmt.Sprintf("exchange %q does not exist", exchange), out.Reason)
	}
	// The check did not create it.
	err := amqptest.Channel(t).ExchangeDeclarePassive(exchange, "topic", true, false, false, false, nil)
	var ae *amqp091.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, amqp091.NotFound, ae.Code)
}

func TestAMQPBrokerDownIsRetryable(t *testing.T) {
	t.Parallel()
	c := newAMQPClient(t, "amqp://guest:guest@127.0.0.1:1/", nil)
	out := deliverNow(c, context.Background(), amqpRequest("deliver.some-exchange", "k", nil))
	require.Equal(t, Retryable, out.Result)
	require.Contains(t, out.Reason, "connect to RabbitMQ")
	require.NotContains(t, out.Reason, "guest:guest")
}

// fakePublisher records topics and fails with err.
type fakePublisher struct {
	mu     sync.Mutex
	topics []string
	msgs   []*message.Message
	err    error
}

func (f *fakePublisher) Publish(topic string, msgs ...*message.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.topics = append(f.topics, topic)
	f.msgs = append(f.msgs, msgs...)
	return f.err
}

func (f *fakePublisher) Close() error { return nil }

func TestAMQPRefusedTargets(t *testing.T) {
	t.Parallel()
	renamed, err := targetcheck.NewAMQPPolicy(targetcheck.AMQPPolicyOptions{
		Internal: []targetcheck.InternalName{
			{Flag: "dispatch-exchange", Name: "ops_dispatch"},
			{Flag: "dispatch-queue", Name: "ops_dispatch", Family: true},
		},
		Allow: map[string][]string{"deliver": {"shared.events", "partners.*"}},
	})
	require.NoError(t, err)
	tests := []struct {
		name         string
		noPublisher  bool
		policy       *targetcheck.AMQPPolicy
		namespace    string
		exchange     string
		key          string
		wantReason   string
		wantNoReason bool
	}{
		{name: "no publisher", noPublisher: true, exchange: "deliver.x", key: "k", wantReason: "AMQP targets are not configured on this dispatcher"},
		{name: "separator in exchange", exchange: "deliver.a|b", key: "k", wantReason: `invalid exchange name "deliver.a|b": '|' is not allowed`},
		{name: "default exchange without queue", wantReason: "no routing key: on the default exchange it names the queue"},
		{name: "reserved exchange", exchange: "cronmesh.dispatch", key: "dispatch.high", wantReason: `exchange "cronmesh.dispatch" is reserved for cronmesh`},
		{name: "reserved queue", key: "cronmesh.dispatch.high", wantReason: `queue "cronmesh.dispatch.high" is reserved for cronmesh`},
		{name: "another namespace's exchange", exchange: "beta.events", key: "k", wantReason: `exchange "beta.events" is not the namespace's: a name must start with "deliver." or be on its allow-list`},
		{name: "another namespace's queue", key: "beta.inbox", wantReason: `queue "beta.inbox" is not the namespace's: a name must start with "deliver." or be on its allow-list`},
		{name: "a job stored without a namespace", namespace: "-", exchange: "deliver.x", key: "k", wantReason: `exchange "deliver.x" is not the namespace's: a name must start with "." or be on its allow-list`},
		{name: "RabbitMQ's built-in exchanges", namespace: "amq", exchange: "amq.topic", key: "k", wantReason: `exchange "amq.topic" is not the namespace's: a name must start with "amq." or be on its allow-list`},
		{name: "own exchange", exchange: "deliver.events", key: "any", wantNoReason: true},
		{name: "own queue", key: "deliver.inbox", wantNoReason: true},
		{name: "renamed dispatch exchange", policy: renamed, exchange: "ops_dispatch", key: "dispatch.high", wantReason: `exchange "ops_dispatch" is reserved for cronmesh`},
		{name: "renamed dispatch queue", policy: renamed, key: "ops_dispatch.high", wantReason: `queue "ops_dispatch.high" is reserved for cronmesh`},
		{name: "allow-listed name", policy: renamed, exchange: "shared.events", key: "k", wantNoReason: true},
		{name: "allow-listed prefix", policy: renamed, key: "partners.acme", wantNoReason: true},
		{name: "another namespace's allow-list", policy: renamed, namespace: "beta", exchange: "shared.events", key: "k", wantReason: `exchange "shared.events" is not the namespace's: a name must start with "beta." or be on its allow-list`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pub := &fakePublisher{}
			c, _ := newTestClient(t, func(o *Options) {
				if !tt.noPublisher {
					o.Publisher = pub
				}
				o.AMQPPolicy = tt.policy
			})
			req := amqpRequest(tt.exchange, tt.key, nil)
			switch tt.namespace {
			case "":
			case "-":
				req.Namespace = ""
			default:
				req.Namespace = tt.namespace
			}
			out := deliverNow(c, context.Background(), req)
			if tt.wantNoReason {
				require.Equal(t, Succeeded, out.Result, out.Reason)
				require.Equal(t, []string{broker.Route(tt.exchange, tt.key)}, pub.topics)
				return
			}
			require.Equal(t, Permanent, out.Result)
			require.Equal(t, tt.wantReason, out.Reason)
			require.Empty(t, pub.topics)
		})
	}
}

func TestAMQPPublishErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		err        error
		want       Result
		wantReason string
	}{
		{"not found", fmt.Errorf("broker: declare exchange %q: %w", "deliver.ex", &amqp091.Error{Code: amqp091.NotFound, Reason: "NOT_FOUND"}), Permanent, `exchange "deliver.ex" does not exist`},
		{"access refused", &amqp091.Error{Code: amqp091.AccessRefused, Reason: "ACCESS_REFUSED - no"}, Permanent, "access refused: ACCESS_REFUSED - no"},
		{"precondition failed", &amqp091.Error{Code: amqp091.PreconditionFailed, Reason: "PRECONDITION_FAILED - too big"}, Permanent, "refused by the broker: PRECONDITION_FAILED - too big"},
		{"connection forced", &amqp091.Error{Code: amqp091.ConnectionForced, Reason: "CONNECTION_FORCED"}, Retryable, ""},
		{"nack", fmt.Errorf("broker: message x: %w", broker.ErrNotConfirmed), Retryable, "broker: message x: broker: publish not confirmed"},
		{"confirm timeout", fmt.Errorf("broker: waiting for confirm: %w", context.DeadlineExceeded), Retryable, "publish not confirmed within 30s"},
		{"closed", broker.ErrPublisherClosed, Retryable, "broker: publisher closed"},
		{"other", errors.New("boom"), Retryable, "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pub := &fakePublisher{err: tt.err}
			c, _ := newTestClient(t, func(o *Options) { o.Publisher = pub })
			out := deliverNow(c, context.Background(), amqpRequest("deliver.ex", "k", nil))
			require.Equal(t, tt.want, out.Result)
			if tt.wantReason != "" {
				require.Equal(t, tt.wantReason, out.Reason)
			}
			require.Equal(t, []string{"deliver.ex|k"}, pub.topics)
			msg := pub.msgs[0]
			require.Equal(t, testExecutionID, msg.UUID)
			require.Equal(t, "application/json", msg.Metadata.Get(metadataContentType))
			deadline, ok := msg.Context().Deadline()
			require.True(t, ok, "the publish is bounded")
			require.WithinDuration(t, time.Now().Add(DefaultAMQPTimeout), deadline, DefaultAMQPTimeout)
		})
	}
}

func TestTargetMarshaler(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage("id-1", []byte("x"))
	msg.Metadata.Set(metadataContentType, "text/plain")
	msg.Metadata.Set("h", "v")
	p, err := targetMarshaler{}.Marshal(msg)
	require.NoError(t, err)
	require.Equal(t, "text/plain", p.ContentType)
	require.Equal(t, "id-1", p.MessageId)
	require.Equal(t, amqp091.Persistent, p.DeliveryMode)
	require.Equal(t, "v", p.Headers["h"])
	require.NotContains(t, p.Headers, metadataContentType)
}

// TestAMQPSlotHeadersAndTemplate publishes a templated job's attempts 1 and
// 2 to the real RabbitMQ and reads back the header table and the body.
func TestAMQPSlotHeadersAndTemplate(t *testing.T) {
	t.Parallel()
	exchange := amqptest.UniqueName(t, "deliver")
	queue := amqptest.DeclareTopicQueue(t, exchange, "reports.#")
	c := newAMQPClient(t, amqptest.URL(), nil)
	nominal := time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)
	req := amqpRequest(exchange, "reports.nightly", func(a *registryv1.AmqpTarget) {
		a.Body = `{"slot":"{{nominal_time}}","attempt":{{attempt}},"execution":"{{execution_id}}","job":"{{job_id}}"}`
		a.BodyFormat = registryv1.BodyFormat_BODY_FORMAT_TEMPLATE
		a.Headers["CRONMESH-ATTEMPT"] = "99" // refused by the registry; dropped here too
	})
	req.NominalTime = timestamppb.New(nominal)
	req.FireTime = timestamppb.New(nominal.Add(2 * time.Second))
	req.TriggerKind = dispatchv1.TriggerKind_TRIGGER_KIND_BACKFILL

	for attempt := int32(1); attempt <= 2; attempt++ {
		req.Attempt = attempt
		out := deliverNow(c, context.Background(), req)
		require.Equal(t, Succeeded, out.Result, out.Reason)
		got := amqptest.Consume(t, queue, 1, amqpWait)[0]

		slot := amqp091.Table{}
		for k, v := range got.Headers {
			if strings.HasPrefix(strings.ToLower(k), "cronmesh-") {
				slot[k] = v
			}
		}
		require.Equal(t, amqp091.Table{
			"cronmesh-nominal-time": "2026-03-01T03:00:00Z",
			"cronmesh-fire-time":    "2026-03-01T03:00:02Z",
			"cronmesh-attempt":      strconv.Itoa(int(attempt)),
			"cronmesh-job-id":       req.JobId,
			"cronmesh-execution-id": testExecutionID,
			"cronmesh-trigger-kind": "backfill",
		}, slot, "attempt %d", attempt)
		require.Equal(t, "alpha", got.Headers["x-tenant"])
		require.Equal(t, fmt.Sprintf(`{"slot":"2026-03-01T03:00:00Z","attempt":%d,"execution":"%s","job":"%s"}`,
			attempt, testExecutionID, req.JobId), string(got.Body))
	}

	broken := amqpRequest(exchange, "reports.nightly", func(a *registryv1.AmqpTarget) {
		a.Body, a.BodyFormat = `{{`, registryv1.BodyFormat_BODY_FORMAT_TEMPLATE
	})
	out := deliverNow(c, context.Background(), broken)
	require.Equal(t, Permanent, out.Result)
	require.Contains(t, out.Reason, "invalid body template")
}
