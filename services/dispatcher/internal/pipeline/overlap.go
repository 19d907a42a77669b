package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/execevent"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/libs/telemetry"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/inflight"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

// DefaultOverlapSweepInterval is how often the pipeline releases stale
// active executions, publishes promoted ones whose publish was not
// confirmed, and retries releases that failed.
const DefaultOverlapSweepInterval = 5 * time.Second

// activeSlack is added per attempt to the bound of an execution's time in
// progress (ActiveSpan): a wait for a delivery slot, a backlog in the
// queue, the confirms of its consequences.
const activeSlack = time.Minute

// sweepBatch bounds the rows one sweep takes of each kind.
const sweepBatch = 100

// Overlap is the state of the overlap policies (ADR 0014); *store.Store
// is one. See store.Admit and store.Release for the semantics.
type Overlap interface {
	Admit(ctx context.Context, a store.Admission) (store.AdmitResult, error)
	Release(ctx context.Context, ref store.ActiveRef, now time.Time) (*store.Promoted, error)
	MarkPublished(ctx context.Context, ref store.ActiveRef) error
	Unpublished(ctx context.Context, now time.Time, limit int) ([]store.Promoted, error)
	StaleActive(ctx context.Context, now time.Time, limit int) ([]store.ActiveRef, error)
	CancelReason(ctx context.Context, namespace, executionID string) (string, error)
}

// SkippedReason is the reason of a SKIPPED event: the execution in
// progress that made the policy skip.
func SkippedReason(running string) string {
	return fmt.Sprintf("skipped: execution %s of this job is still in progress", running)
}

// BufferedReason is the reason of a BUFFERED event: the execution in
// progress the slot waits for.
func BufferedReason(running string) string {
	return fmt.Sprintf("buffered: waiting for execution %s of this job to end", running)
}

// overlapped reports whether req's execution has an overlap policy to
// enforce: a policy other than ALLOW (unspecified reads as ALLOW), and an
// Overlap to enforce it with. Everything else costs nothing here.
func (p *Pipeline) overlapped(req *dispatchv1.DispatchRequest) bool {
	if p.opts.Overlap == nil {
		return false
	}
	switch req.GetOverlapPolicy() {
	case registryv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED, registryv1.OverlapPolicy_OVERLAP_POLICY_ALLOW:
		return false
	}
	return true
}

// ActiveSpan bounds how long req's execution, starting at now, can be in
// progress: every attempt its retry policy allows at the attempt timeout,
// the retry delays between them (as tiers), and activeSlack per attempt;
// no later than its execution deadline or its next slot (when it stops
// retrying there) plus one attempt. Past it, a leaked hold on its job (an
// outcome never seen) no longer counts. A Retry-After longer than the
// policy's backoff can make an execution outlast it; the job is then no
// longer held back by it.
func ActiveSpan(tiers []time.Duration, req *dispatchv1.DispatchRequest, now time.Time) time.Duration {
	attempt := attemptTimeout(req) + activeSlack
	retries := MaxRetries(req.GetRetryPolicy())
	span := time.Duration(retries+1) * attempt
	for n := int32(1); n <= retries; n++ {
		span += RetryDelay(tiers, req.GetRetryPolicy(), n, 0)
	}
	if d := req.GetDeadlineTime(); d != nil {
		span = min(span, d.AsTime().Sub(now)+attempt)
	}
	if n := req.GetNextSlotTime(); n != nil {
		span = min(span, n.AsTime().Sub(now)+attempt)
	}
	return max(span, attempt)
}

// attemptTimeout is how long one attempt of req may take.
func attemptTimeout(req *dispatchv1.DispatchRequest) time.Duration {
	if h := req.GetTarget().GetHttp(); h != nil {
		if t := h.GetTimeout(); t != nil && t.AsDuration() > 0 {
			return min(t.AsDuration(), deliver.DefaultMaxTimeout)
		}
		return deliver.DefaultTimeout
	}
	return deliver.DefaultAMQPTimeout
}

// admit applies req's overlap policy to its first attempt. It returns the
// message's verdict and true when the attempt is not to be delivered
// (skipped, buffered, or the policy's state could not be reached: the
// message is then requeued, so that the policy is never bypassed).
func (p *Pipeline) admit(ctx context.Context, span trace.Span, req *dispatchv1.DispatchRequest, md message.Metadata, traceID string) (verdict, bool) {
	now := p.opts.Clock.Now()
	callCtx, cancel := context.WithTimeout(ctx, p.opts.PublishTimeout)
	res, err := p.opts.Overlap.Admit(callCtx, store.Admission{
		Request: req, Trace: p.traceCarrier(md), Now: now, Span: ActiveSpan(p.opts.RetryTiers, req, now),
	})
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return requeueNow, true
		}
		p.metrics.overlapErrors.Inc()
		p.logger.WarnContext(ctx, "applying the overlap policy failed; the request will be redelivered",
			slog.String("execution_id", req.ExecutionId), slog.Any("error", err))
		return requeueLater, true
	}
	p.metrics.overlap.WithLabelValues(res.Decision.String()).Inc()
	span.SetAttributes(attribute.String("cronmesh.overlap.decision", res.Decision.String()))
	if res.Promoted != nil {
		p.publishPromoted(ctx, *res.Promoted)
	}
	switch res.Decision {
	case store.Skipped:
		span.SetAttributes(attribute.String("cronmesh.dispatch.outcome", "skipped"))
		ev := execevent.New(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SKIPPED, req, now, execevent.Attempt{}, SkippedReason(res.Other), traceID)
		ev.Attempt = 0 // no attempt was made, as for MISSED
		wait := p.emit(ctx, ev)
		// Recorded final, so that a redelivery is acked as a duplicate.
		return p.completed(ctx, req, p.await(ctx, span, nil, wait), true, now), true
	case store.Buffered:
		// Announced, so that the history shows the slot waiting and the
		// missed-schedule watchdog sees it fired.
		span.SetAttributes(attribute.String("cronmesh.dispatch.outcome", "buffered"))
		ev := execevent.New(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_BUFFERED, req, now, execevent.Attempt{}, BufferedReason(res.Other), traceID)
		ev.Attempt = 0
		return p.await(ctx, span, nil, p.emit(ctx, ev)), true
	case store.AlreadyBuffered:
		span.SetAttributes(attribute.String("cronmesh.dispatch.outcome", "buffered"))
		return ack, true
	case store.CancelledOther:
		if p.opts.Cancels != nil {
			// The other replicas learn of it from the feed.
			p.opts.Cancels.Cancel(inflight.Ref{Namespace: req.Namespace, ExecutionID: res.Other})
		}
	}
	return ack, false
}

// finished records req's final outcome like completed and then, for an
// execution with an overlap policy, ends its hold on its job (release).
// The record comes first: a redelivery after a crash between the two is a
// duplicate whose look-up says final, and releases again.
func (p *Pipeline) finished(ctx context.Context, req *dispatchv1.DispatchRequest, v verdict, now time.Time) verdict {
	v = p.completed(ctx, req, v, true, now)
	if v == ack {
		p.release(ctx, req)
	}
	return v
}

// release ends req's execution's hold on its job when it has an overlap
// policy, and publishes the buffered execution that takes its place. A
// release that fails is retried by the sweep (and, if the dispatcher stops
// first, the hold ends at its stale bound).
func (p *Pipeline) release(ctx context.Context, req *dispatchv1.DispatchRequest) {
	if !p.overlapped(req) {
		return
	}
	p.releaseRef(ctx, store.ActiveRef{Namespace: req.Namespace, JobID: req.JobId, ExecutionID: req.ExecutionId})
}

func (p *Pipeline) releaseRef(ctx context.Context, ref store.ActiveRef) {
	callCtx, cancel := context.WithTimeout(ctx, p.opts.PublishTimeout)
	promoted, err := p.opts.Overlap.Release(callCtx, ref, p.opts.Clock.Now())
	cancel()
	if err != nil {
		p.metrics.overlapErrors.Inc()
		p.releases.add(ref)
		p.logger.WarnContext(ctx, "releasing a job held by its overlap policy failed; retrying",
			slog.String("execution_id", ref.ExecutionID), slog.Any("error", err))
		return
	}
	p.releases.remove(ref)
	if promoted != nil {
		p.publishPromoted(ctx, *promoted)
	}
}

// publishPromoted publishes a buffered execution that became active to
// the dispatch exchange, in its own trace, and records it published. It is
// flagged as a possible duplicate (the sweep may publish it again), so
// that the dispatcher looks it up before delivering. A failure is left to
// the sweep, which publishes it again after store.RepublishAfter.
func (p *Pipeline) publishPromoted(ctx context.Context, promoted store.Promoted) {
	body, err := proto.Marshal(promoted.Request)
	if err == nil {
		pctx := telemetry.ExtractMap(ctx, p.opts.Propagator, promoted.Trace)
		err = p.publishWith(pctx, DispatchRoute(p.opts.DispatchExchange, promoted.Request.GetPriority()), promoted.ExecutionID, body,
			map[string]string{outbox.PossibleDuplicateHeader: "1"})
	}
	if err != nil {
		p.metrics.publishFailures.WithLabelValues("promoted").Inc()
		p.logger.WarnContext(ctx, "publishing a buffered execution failed; the sweep publishes it again",
			slog.String("execution_id", promoted.ExecutionID), slog.Any("error", err))
		return
	}
	p.metrics.promoted.Inc()
	ref := store.ActiveRef{Namespace: promoted.Namespace, JobID: promoted.JobID, ExecutionID: promoted.ExecutionID}
	callCtx, cancel := context.WithTimeout(ctx, p.opts.PublishTimeout)
	defer cancel()
	if err := p.opts.Overlap.MarkPublished(callCtx, ref); err != nil {
		p.logger.WarnContext(ctx, "recording a buffered execution published failed; the sweep may publish it again",
			slog.String("execution_id", promoted.ExecutionID), slog.Any("error", err))
	}
}

// sweepOverlap runs sweepOnce at start and every OverlapSweepInterval
// until ctx ends.
func (p *Pipeline) sweepOverlap(ctx context.Context) {
	for {
		if err := p.sweepOnce(ctx); err != nil && ctx.Err() == nil {
			p.logger.WarnContext(ctx, "sweeping the overlap policies' state failed; retrying", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return
		case <-p.opts.Clock.After(p.opts.OverlapSweepInterval):
		}
	}
}

// sweepOnce retries the releases that failed, releases active executions
// past their stale bound, and publishes promoted executions whose publish
// was not confirmed in time (their replica died, or the broker was away).
func (p *Pipeline) sweepOnce(ctx context.Context) error {
	for _, ref := range p.releases.list() {
		p.releaseRef(ctx, ref)
	}
	now := p.opts.Clock.Now()
	stale, err := p.opts.Overlap.StaleActive(ctx, now, sweepBatch)
	if err != nil {
		return err
	}
	for _, ref := range stale {
		p.logger.WarnContext(ctx, "an execution held its job past its bound; releasing it",
			slog.String("execution_id", ref.ExecutionID), slog.String("job_id", ref.JobID))
		p.metrics.staleReleases.Inc()
		p.releaseRef(ctx, ref)
	}
	unpublished, err := p.opts.Overlap.Unpublished(ctx, now, sweepBatch)
	if err != nil {
		return err
	}
	for _, promoted := range unpublished {
		p.publishPromoted(ctx, promoted)
	}
	return nil
}

// cancelReason is why req's execution was cancelled: the reason recorded
// with its cancellation (an overlap policy's), or fallback (CancelExecution
// records none). Asked only when a cancelled request is dropped or an
// attempt aborted.
func (p *Pipeline) cancelReason(ctx context.Context, req *dispatchv1.DispatchRequest, fallback string) string {
	if p.opts.Overlap == nil {
		return fallback
	}
	callCtx, cancel := context.WithTimeout(ctx, p.opts.CancelTimeout)
	defer cancel()
	reason, err := p.opts.Overlap.CancelReason(callCtx, req.Namespace, req.ExecutionId)
	if err != nil || reason == "" {
		return fallback
	}
	return reason
}

// traceCarrier is the trace context of a message's metadata, kept with a
// buffered request.
func (p *Pipeline) traceCarrier(md message.Metadata) map[string]string {
	out := map[string]string{}
	for _, k := range p.opts.Propagator.Fields() {
		if v := md.Get(k); v != "" {
			out[k] = v
		}
	}
	return out
}

// refSet is the releases that failed, retried by the sweep.
type refSet struct {
	mu   sync.Mutex
	refs map[store.ActiveRef]struct{}
}

func (s *refSet) add(ref store.ActiveRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refs == nil {
		s.refs = map[store.ActiveRef]struct{}{}
	}
	s.refs[ref] = struct{}{}
}

func (s *refSet) remove(ref store.ActiveRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.refs, ref)
}

func (s *refSet) list() []store.ActiveRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]store.ActiveRef, 0, len(s.refs))
	for ref := range s.refs {
		out = append(out, ref)
	}
	return out
}
