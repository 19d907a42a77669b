package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/cronmesh/cronmesh/libs/broker"
)

// consumeBatches hands the subscriptions' messages to handleBatch in
// batches (broker.ConsumeBatches), until ctx is done and the
// subscriptions' channels are closed.
func (c *Consumer) consumeBatches(ctx context.Context, channels []<-chan *message.Message) {
	broker.ConsumeBatches(ctx, channels, broker.BatchOptions{
		Loops: c.opts.Batches, MaxBatch: c.opts.MaxBatch, Linger: c.opts.Linger,
		Backoff: c.opts.Backoff, MaxBackoff: c.opts.MaxBackoff, Clock: c.opts.Clock,
	}, c.handleBatch)
}

// handleBatch runs the batch handler, acknowledges what it handled (and
// its poison messages) and returns the messages to requeue.
func (c *Consumer) handleBatch(ctx context.Context, msgs []*message.Message) []*message.Message {
	spans := make([]trace.Span, len(msgs))
	links := make([]trace.Link, len(msgs))
	for i, msg := range msgs {
		_, spans[i] = c.startSpan(ctx, msg)
		links[i] = trace.Link{SpanContext: spans[i].SpanContext()}
	}
	defer func() {
		for _, span := range spans {
			span.End()
		}
	}()
	// A batch under way finishes even if ctx ends: stopping it halfway
	// would only requeue its messages.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handleTimeout)
	defer cancel()
	var batchSpan trace.Span
	if len(msgs) == 1 {
		// The message's own span is the batch's; ended with the others.
		hctx = trace.ContextWithSpan(hctx, spans[0])
		batchSpan = noop.Span{}
	} else {
		hctx, batchSpan = c.tracer.Start(hctx, "process batch "+c.opts.Exchange, trace.WithLinks(links...),
			trace.WithAttributes(
				semconv.MessagingSystemRabbitMQ,
				semconv.MessagingDestinationName(c.opts.Exchange),
				semconv.MessagingDestinationSubscriptionName(c.opts.Queue),
				semconv.MessagingOperationTypeProcess,
				semconv.MessagingBatchMessageCount(len(msgs)),
			))
	}
	defer batchSpan.End()
	errs, err := c.opts.BatchHandler(hctx, msgs)
	if err == nil && len(errs) != len(msgs) {
		err = fmt.Errorf("the handler returned %d results for %d messages", len(errs), len(msgs))
	}
	if err != nil {
		batchSpan.RecordError(err)
		batchSpan.SetStatus(codes.Error, "processing failed")
		for _, span := range spans {
			span.RecordError(err)
			span.SetStatus(codes.Error, "processing failed")
		}
		c.logger.WarnContext(ctx, "processing a batch failed; it will be redelivered",
			slog.Int("messages", len(msgs)), slog.String("first_message_id", msgs[0].UUID), slog.Any("error", err))
		return msgs
	}
	var requeue []*message.Message
	for i, msg := range msgs {
		switch err := errs[i]; {
		case err == nil:
			msg.Ack()
		case errors.Is(err, ErrPoison):
			spans[i].RecordError(err)
			spans[i].SetStatus(codes.Error, "poison message")
			c.logger.ErrorContext(trace.ContextWithSpan(ctx, spans[i]), "dropping a message that can never be processed",
				slog.String("message_id", msg.UUID), slog.Int("bytes", len(msg.Payload)), slog.Any("error", err))
			msg.Ack()
		default:
			spans[i].RecordError(err)
			spans[i].SetStatus(codes.Error, "processing failed")
			c.logger.WarnContext(trace.ContextWithSpan(ctx, spans[i]), "processing a message failed; it will be redelivered",
				slog.String("message_id", msg.UUID), slog.Any("error", err))
			requeue = append(requeue, msg)
		}
	}
	return requeue
}

// startSpan starts msg's consumer span, a child of the publisher's.
func (c *Consumer) startSpan(ctx context.Context, msg *message.Message) (context.Context, trace.Span) {
	ctx = broker.ExtractTrace(ctx, c.opts.Propagator, msg.Metadata)
	return c.tracer.Start(ctx, "process "+c.opts.Exchange,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(broker.ProcessAttributes(c.opts.Exchange, c.opts.Queue, msg.UUID)...))
}
