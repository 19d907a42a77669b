package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"
)

// BenchmarkPipeline measures the pipeline's own cost per delivery on the
// local RabbitMQ and PostgreSQL: b.N normal-priority requests are queued
// first, then the pipeline (default workers, an instant Deliverer)
// delivers them all, with their cancellation look-ups, STARTED and
// SUCCEEDED events and acknowledgements. Run with a fixed count, e.g.
// -bench Pipeline -benchtime 20000x.
func BenchmarkPipeline(b *testing.B) {
	e := newEnv(b)
	require.NoError(b, broker.DeclareQueues(b.Context(), e.opts.AMQPURL, broker.DispatchQueues(e.opts.DispatchExchange, e.opts.DispatchQueue)...))
	reqs := make([]*dispatchv1.DispatchRequest, b.N)
	for i := range reqs {
		reqs[i] = request(registryv1.Priority_PRIORITY_NORMAL)
	}
	e.dispatch(nil, reqs...)
	instant := &fake{fn: func(context.Context, *dispatchv1.DispatchRequest) deliver.Outcome {
		return deliver.Outcome{Result: deliver.Succeeded, StatusCode: 200}
	}}
	b.ResetTimer()
	r := e.start(instant, func(o *pipeline.Options) { o.Workers = pipeline.Workers{} })
	require.Eventually(b, func() bool { return metric(b, r.reg, "deliveries_total") >= float64(b.N) }, 10*time.Minute, time.Millisecond)
	r.stop(b)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
	b.ReportMetric(metric(b, r.reg, "event_batches_published_total"), "event-messages")
}
