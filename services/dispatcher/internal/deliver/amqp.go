package deliver

import (
	"context"
	"errors"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/slotinfo"
)

// DefaultContentType is an AMQP target's content type when the job sets
// none (the registry's default).
const DefaultContentType = "application/json"

// metadataContentType carries the job's content type from Deliver to
// [PublisherConfig]'s marshaler, which moves it into the AMQP content-type
// property. With another marshaler it would arrive as a header.
const metadataContentType = "_cronmesh_content_type"

// PublisherConfig returns the watermill-amqp config of the publisher that
// Options.Publisher should be (with broker.NewPublisher): like
// broker.RoutedPublisherConfig (the topic is broker.Route(exchange,
// routingKey); confirms; persistent delivery; message-id = the message
// UUID), except that
//
//   - exchanges are checked with a passive declare instead of declared: a
//     job's exchange must already exist, cronmesh never creates one on a
//     user's behalf, and an existing exchange of another type than topic
//     (direct, fanout, headers) is used as it is instead of failing the
//     declaration with 406 PRECONDITION_FAILED. A missing exchange fails
//     the publish with 404 NOT_FOUND, which Deliver reports as Permanent;
//   - the marshaler sets the AMQP content-type property from the job.
//
// The passive check is cached per connection, like broker.Publisher's
// declarations: an exchange deleted afterwards makes the broker close the
// channel, that attempt is Retryable (not confirmed), and the next one
// checks again and is Permanent.
func PublisherConfig(amqpURL string, channelPoolSize int) amqp.Config {
	cfg := broker.RoutedPublisherConfig(amqpURL, channelPoolSize)
	cfg.TopologyBuilder = passiveTopology{}
	cfg.Marshaler = targetMarshaler{}
	return cfg
}

// passiveTopology is an amqp.TopologyBuilder that only checks that an
// exchange exists.
type passiveTopology struct{}

// ExchangeDeclare declares exchangeName passively: RabbitMQ answers 404
// NOT_FOUND (and closes the channel) when it does not exist, and ignores
// every other field of the declaration.
func (passiveTopology) ExchangeDeclare(ch *amqp091.Channel, exchangeName string, cfg amqp.Config) error {
	return ch.ExchangeDeclarePassive(exchangeName, cfg.Exchange.Type, cfg.Exchange.Durable,
		cfg.Exchange.AutoDeleted, cfg.Exchange.Internal, false, nil)
}

// BuildTopology is for subscribers, which this config is not for.
func (passiveTopology) BuildTopology(*amqp091.Channel, amqp.BuildTopologyParams, amqp.Config, watermill.LoggerAdapter) error {
	return errors.New("deliver: the AMQP target publisher config does not subscribe")
}

// targetMarshaler is broker.Marshaler plus the content-type property.
type targetMarshaler struct{ broker.Marshaler }

// Marshal moves the content type out of the headers into its property.
func (m targetMarshaler) Marshal(msg *message.Message) (amqp091.Publishing, error) {
	p, err := m.Marshaler.Marshal(msg)
	if err != nil {
		return p, err
	}
	if ct, ok := p.Headers[metadataContentType].(string); ok {
		p.ContentType = ct
		delete(p.Headers, metadataContentType)
	}
	return p, nil
}

// deliverAMQP publishes the job's message and waits for the confirm.
func (c *Client) deliverAMQP(ctx context.Context, req *dispatchv1.DispatchRequest, t *registryv1.AmqpTarget) Outcome {
	exchange, key := t.GetExchange(), t.GetRoutingKey()
	switch {
	case c.publisher == nil:
		return permanent("AMQP targets are not configured on this dispatcher")
	case strings.Contains(exchange, "|"):
		// broker.Route joins exchange and key with '|'; the first one
		// ends the exchange name. RabbitMQ accepts '|', AMQP 0-9-1 not.
		return permanent("invalid exchange name %q: '|' is not allowed", exchange)
	case exchange == "" && key == "":
		return permanent("no routing key: on the default exchange it names the queue")
	}
	if _, reason := c.amqpPolicy.Refusal(req.GetNamespace(), exchange, key); reason != "" {
		return permanent("%s", reason)
	}
	destination := exchange
	if destination == "" {
		destination = "amq.default"
	}
	ctx, span := c.tracer.Start(ctx, "publish "+destination,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingSystemRabbitMQ,
			semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName("publish"),
			semconv.MessagingDestinationName(destination),
			semconv.MessagingRabbitMQDestinationRoutingKey(key),
			semconv.MessagingMessageID(req.GetExecutionId()),
			attribute.String("cronmesh.execution.id", req.GetExecutionId()),
			attribute.String("cronmesh.job.id", req.GetJobId()),
			attribute.Int("cronmesh.attempt", int(req.GetAttempt())),
		))
	defer span.End()

	contentType := t.GetContentType()
	if contentType == "" {
		contentType = DefaultContentType
	}
	slot := slotinfo.FromRequest(req)
	body, err := slotinfo.Body(t.GetBody(), t.GetBodyFormat(), contentType, slot)
	if err != nil {
		out := permanent("invalid body template: %v", err)
		span.SetStatus(codes.Error, out.Reason)
		return out
	}
	msg := message.NewMessage(req.GetExecutionId(), body)
	for _, headers := range [...]map[string]string{t.GetHeaders(), t.GetSecretHeaders()} {
		for k, v := range headers {
			if !slotinfo.IsReservedHeader(k) { // refused by the registry; defence in depth
				msg.Metadata.Set(k, v)
			}
		}
	}
	for _, h := range slot.Headers() {
		msg.Metadata.Set(h.Name, h.Value)
	}
	msg.Metadata.Set(metadataContentType, contentType)
	broker.InjectTrace(ctx, c.propagator, msg.Metadata)
	publishCtx, cancel := context.WithTimeout(ctx, c.amqpTimeout)
	defer cancel()
	msg.SetContext(publishCtx)

	err = c.publisher.Publish(broker.Route(exchange, key), msg)
	if err == nil {
		return Outcome{Result: Succeeded}
	}
	out := c.classifyPublishError(ctx, exchange, err)
	span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)))
	span.SetStatus(codes.Error, out.Reason)
	return out
}

// classifyPublishError: an exchange that does not exist (404), access
// refused (403) or a message the broker will never take (406, for example
// over the maximum size) is Permanent; anything else (the broker down, a
// lost connection, no confirm in time, a nack) is Retryable.
func (c *Client) classifyPublishError(ctx context.Context, exchange string, err error) Outcome {
	var ae *amqp091.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp091.NotFound:
			return permanent("exchange %q does not exist", exchange)
		case amqp091.AccessRefused:
			return permanent("access refused: %s", ae.Reason)
		case amqp091.PreconditionFailed:
			return permanent("refused by the broker: %s", ae.Reason)
		}
	}
	if ctx.Err() != nil {
		return retryable("delivery canceled: %v", context.Cause(ctx))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return retryable("publish not confirmed within %v", c.amqpTimeout)
	}
	return retryable("%v", err)
}

// errorType is the span's error.type of a failed publish.
func errorType(err error) string {
	var ae *amqp091.Error
	switch {
	case errors.As(err, &ae):
		return "amqp_" + amqpErrorName(ae.Code)
	case errors.Is(err, context.DeadlineExceeded):
		return errTypeTimeout
	case errors.Is(err, broker.ErrNotConfirmed):
		return "not_confirmed"
	}
	return errTypeNetwork
}

// amqpErrorName names the AMQP reply codes a publish can meet.
func amqpErrorName(code int) string {
	switch code {
	case amqp091.NotFound:
		return "not_found"
	case amqp091.AccessRefused:
		return "access_refused"
	case amqp091.PreconditionFailed:
		return "precondition_failed"
	case amqp091.ResourceLocked:
		return "resource_locked"
	case amqp091.ChannelError:
		return "channel_error"
	case amqp091.ConnectionForced:
		return "connection_forced"
	}
	return "error"
}
