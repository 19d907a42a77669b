package pipeline_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

// dispatchPacked publishes reqs packed into one broker message, as the
// trigger's relay does, with headers on the broker message.
func (e *env) dispatchPacked(headers amqp091.Table, reqs ...*dispatchv1.DispatchRequest) {
	e.t.Helper()
	msgs := make([]*message.Message, len(reqs))
	for i, req := range reqs {
		body, err := proto.Marshal(req)
		require.NoError(e.t, err)
		msgs[i] = message.NewMessage(req.ExecutionId, body)
	}
	packed, err := broker.Pack(msgs)
	require.NoError(e.t, err)
	if headers == nil {
		headers = amqp091.Table{}
	}
	for k, v := range packed.Metadata {
		headers[k] = v
	}
	ch := amqptest.Channel(e.t)
	require.NoError(e.t, ch.Confirm(false))
	e.publishRaw(ch, broker.DispatchRoutingKey(pipeline.PriorityName(reqs[0].Priority)), packed.UUID, packed.Payload, headers)
}

// TestBatchOfRequests: the requests of a packed message are delivered
// concurrently, each with its own outcome: a slow target holds up only the
// message's acknowledgement, a failing one gets its retry, and the message
// is acknowledged once all are settled. A redelivery of the batch delivers
// none of them again.
func TestBatchOfRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	release := make(chan struct{})
	f := &fake{fn: func(ctx context.Context, req *dispatchv1.DispatchRequest) deliver.Outcome {
		switch req.JobDisplayName {
		case "slow":
			select {
			case <-release:
			case <-ctx.Done():
			}
		case "flaky":
			if req.Attempt == 1 {
				return deliver.Outcome{Result: deliver.Retryable, StatusCode: 503, Reason: "HTTP 503"}
			}
		}
		return deliver.Outcome{Result: deliver.Succeeded, StatusCode: 200}
	}}
	// A look-up that times out delivers (at least once, by design): on a
	// loaded machine that would deliver the redelivered batch's requests
	// again, which is not what this test is about.
	r := e.start(f, func(o *pipeline.Options) { o.CancelTimeout = 30 * time.Second })
	named := func(name string) func(*dispatchv1.DispatchRequest) {
		return func(req *dispatchv1.DispatchRequest) { req.JobDisplayName = name }
	}
	fast := request(registryv1.Priority_PRIORITY_NORMAL, named("fast"))
	flaky := request(registryv1.Priority_PRIORITY_NORMAL, named("flaky"))
	slow := request(registryv1.Priority_PRIORITY_NORMAL, named("slow"))
	e.dispatchPacked(nil, fast, flaky, slow)

	// The others are delivered, the flaky one retried, while the slow one
	// still holds the batch.
	e.waitFor(fast.ExecutionId, succeeded, 1)
	e.waitFor(flaky.ExecutionId, succeeded, 2)
	require.Eventually(t, func() bool { return len(f.of(slow.ExecutionId)) == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 0.0, metric(t, r.reg, "duplicates_skipped_total"))
	close(release)
	e.waitFor(slow.ExecutionId, succeeded, 1)
	// The outcome event comes before the completion record, which the
	// redelivery below is checked against: wait for the records (the
	// queue's depth counts ready messages, so it is 0 before the batch is
	// acknowledged too).
	require.Eventually(t, func() bool {
		done, err := e.store.Completed(t.Context(), []store.AttemptRef{
			attemptOf(fast, 1), attemptOf(flaky, 2), attemptOf(slow, 1),
		})
		return err == nil && !slices.Contains(done, false)
	}, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 1.0, metric(t, r.reg, "dispatch_batch_requests"))

	// The same batch again, as the broker would redeliver it.
	e.dispatchPacked(amqp091.Table{"x-delivery-count": int64(1)}, fast, flaky, slow)
	require.Eventually(t, func() bool { return metric(t, r.reg, "duplicates_skipped_total") == 3 }, 30*time.Second, 10*time.Millisecond)
	require.Len(t, f.of(fast.ExecutionId), 1)
	require.Len(t, f.of(flaky.ExecutionId), 2)
	require.Len(t, f.of(slow.ExecutionId), 1)
}

// TestBatchThatIsNotOne: a message marked as a batch whose body is not one
// is dropped as poison, without blocking the queue.
func TestBatchThatIsNotOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.start(&fake{})
	ch := amqptest.Channel(t)
	require.NoError(t, ch.Confirm(false))
	e.publishRaw(ch, broker.DispatchRoutingKey("normal"), "not-a-batch", []byte("\xff\xff"), amqp091.Table{broker.BatchHeader: "2"})
	ok := request(registryv1.Priority_PRIORITY_NORMAL)
	e.dispatch(nil, ok)
	e.waitFor(ok.ExecutionId, succeeded, 1)
	require.Eventually(t, func() bool { return metric(t, r.reg, "poison_messages_total") == 1 }, 10*time.Second, 10*time.Millisecond)
}
