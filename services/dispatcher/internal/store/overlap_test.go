package store_test

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

const (
	skip        = registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP
	bufferOne   = registryv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE
	cancelOther = registryv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_OTHER
)

// firstAttempt is a first attempt of a new execution of job with policy.
func firstAttempt(job string, policy registryv1.OverlapPolicy) *dispatchv1.DispatchRequest {
	return &dispatchv1.DispatchRequest{
		ExecutionId: uuid.NewString(), JobId: job, Namespace: "alpha", Attempt: 1, OverlapPolicy: policy,
		Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: "https://example.test", SigningSecret: secret}}},
	}
}

func admit(t *testing.T, s *store.Store, req *dispatchv1.DispatchRequest, now time.Time) store.AdmitResult {
	t.Helper()
	res, err := s.Admit(t.Context(), store.Admission{Request: req, Now: now, Span: time.Hour, Trace: map[string]string{"traceparent": "00-" + req.ExecutionId}})
	require.NoError(t, err)
	return res
}

func active(t *testing.T, s *store.Store, job string) (store.Active, bool) {
	t.Helper()
	a, ok, err := s.Active(t.Context(), "alpha", job)
	require.NoError(t, err)
	return a, ok
}

func ref(req *dispatchv1.DispatchRequest) store.ActiveRef {
	return store.ActiveRef{Namespace: req.Namespace, JobID: req.JobId, ExecutionID: req.ExecutionId}
}

func TestAdmitSkip(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	now := time.Now()
	job := uuid.NewString()
	first, second := firstAttempt(job, skip), firstAttempt(job, skip)

	require.Equal(t, store.AdmitResult{Decision: store.Admitted}, admit(t, s, first, now))
	require.Equal(t, store.AdmitResult{Decision: store.Admitted}, admit(t, s, first, now), "a redelivery of the active one proceeds")
	require.Equal(t, store.AdmitResult{Decision: store.Skipped, Other: first.ExecutionId}, admit(t, s, second, now))
	a, ok := active(t, s, job)
	require.True(t, ok)
	require.Equal(t, first.ExecutionId, a.ExecutionID)
	require.Equal(t, now.Add(time.Hour).UTC().Truncate(time.Microsecond), a.StaleAfter)

	// Another job, and the same job id in another namespace, are not held.
	require.Equal(t, store.Admitted, admit(t, s, firstAttempt(uuid.NewString(), skip), now).Decision)
	foreign := firstAttempt(job, skip)
	foreign.Namespace = "beta"
	require.Equal(t, store.Admitted, admit(t, s, foreign, now).Decision)

	// A release by another execution changes nothing; the active one's
	// frees the job.
	p, err := s.Release(t.Context(), ref(second), now)
	require.NoError(t, err)
	require.Nil(t, p)
	_, ok = active(t, s, job)
	require.True(t, ok)
	p, err = s.Release(t.Context(), ref(first), now)
	require.NoError(t, err)
	require.Nil(t, p)
	_, ok = active(t, s, job)
	require.False(t, ok)
	third := firstAttempt(job, skip)
	require.Equal(t, store.Admitted, admit(t, s, third, now).Decision)
}

func TestAdmitBufferOne(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	now := time.Now()
	job := uuid.NewString()
	first, second, third := firstAttempt(job, bufferOne), firstAttempt(job, bufferOne), firstAttempt(job, bufferOne)

	require.Equal(t, store.Admitted, admit(t, s, first, now).Decision)
	require.Equal(t, store.AdmitResult{Decision: store.Buffered, Other: first.ExecutionId}, admit(t, s, second, now))
	require.Equal(t, store.AdmitResult{Decision: store.AlreadyBuffered, Other: first.ExecutionId}, admit(t, s, second, now), "a redelivery of the buffered one")
	require.Equal(t, store.AdmitResult{Decision: store.Skipped, Other: first.ExecutionId}, admit(t, s, third, now), "one waits at most")
	a, _ := active(t, s, job)
	require.Equal(t, second.ExecutionId, a.Buffered)

	// The active one's end promotes the buffered one, with its request and
	// trace, unpublished until marked.
	later := now.Add(time.Minute)
	p, err := s.Release(t.Context(), ref(first), later)
	require.NoError(t, err)
	require.NotNil(t, p)
	require.Equal(t, second.ExecutionId, p.ExecutionID)
	require.Equal(t, second.ExecutionId, p.Request.ExecutionId)
	require.Equal(t, secret, p.Request.Target.GetHttp().SigningSecret, "the request keeps its secret: it is delivered")
	require.Equal(t, map[string]string{"traceparent": "00-" + second.ExecutionId}, p.Trace)
	a, _ = active(t, s, job)
	require.Equal(t, store.Active{
		ExecutionID: second.ExecutionId, StartedAt: later.UTC().Truncate(time.Microsecond),
		StaleAfter: later.Add(time.Hour).UTC().Truncate(time.Microsecond), Unpublished: true,
	}, a)

	// Not confirmed: the sweep finds it once RepublishAfter has passed,
	// and only once per RepublishAfter.
	got, err := s.Unpublished(t.Context(), later, 10)
	require.NoError(t, err)
	require.Empty(t, got)
	sweep := later.Add(store.RepublishAfter)
	got, err = s.Unpublished(t.Context(), sweep, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, second.ExecutionId, got[0].ExecutionID)
	got, err = s.Unpublished(t.Context(), sweep, 10)
	require.NoError(t, err)
	require.Empty(t, got)

	require.NoError(t, s.MarkPublished(t.Context(), ref(second)))
	a, _ = active(t, s, job)
	require.False(t, a.Unpublished)
	got, err = s.Unpublished(t.Context(), sweep.Add(store.RepublishAfter), 10)
	require.NoError(t, err)
	require.Empty(t, got)

	// The promoted one arriving is admitted; its end frees the job.
	require.Equal(t, store.Admitted, admit(t, s, second, later).Decision)
	p, err = s.Release(t.Context(), ref(second), later)
	require.NoError(t, err)
	require.Nil(t, p)
	_, ok := active(t, s, job)
	require.False(t, ok)
}

func TestAdmitCancelOther(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	now := time.Now()
	job := uuid.NewString()
	first, second := firstAttempt(job, cancelOther), firstAttempt(job, cancelOther)

	require.Equal(t, store.Admitted, admit(t, s, first, now).Decision)
	require.Equal(t, store.AdmitResult{Decision: store.CancelledOther, Other: first.ExecutionId}, admit(t, s, second, now))
	a, _ := active(t, s, job)
	require.Equal(t, second.ExecutionId, a.ExecutionID)

	// The cancellation is recorded as CancelExecution records one (the
	// feed and the look-up see it), with its reason.
	cancelled, err := s.Cancelled(t.Context(), []store.ExecutionRef{{Namespace: "alpha", ExecutionID: first.ExecutionId}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, cancelled)
	reason, err := s.CancelReason(t.Context(), "alpha", first.ExecutionId)
	require.NoError(t, err)
	require.Equal(t, "cancelled by overlap policy: execution "+second.ExecutionId, reason)
	reason, err = s.CancelReason(t.Context(), "alpha", second.ExecutionId)
	require.NoError(t, err)
	require.Empty(t, reason)

	// The cancelled one's end no longer holds anything.
	p, err := s.Release(t.Context(), ref(first), now)
	require.NoError(t, err)
	require.Nil(t, p)
	a, _ = active(t, s, job)
	require.Equal(t, second.ExecutionId, a.ExecutionID)
}

// Mixed policies on one job (a run or backfill with its own): a CANCEL_OTHER
// leaves a buffered execution waiting, and replacing a promoted execution
// that was never published hands its request back, to be published and
// dropped as cancelled.
func TestAdmitCancelOtherOverBufferAndUnpublished(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	now := time.Now()
	job := uuid.NewString()
	first, waiting, cancelling := firstAttempt(job, bufferOne), firstAttempt(job, bufferOne), firstAttempt(job, cancelOther)
	admit(t, s, first, now)
	admit(t, s, waiting, now)
	require.Equal(t, store.AdmitResult{Decision: store.CancelledOther, Other: first.ExecutionId}, admit(t, s, cancelling, now))
	a, _ := active(t, s, job)
	require.Equal(t, waiting.ExecutionId, a.Buffered, "the buffered one keeps waiting")

	p, err := s.Release(t.Context(), ref(cancelling), now)
	require.NoError(t, err)
	require.Equal(t, waiting.ExecutionId, p.ExecutionID)
	again := firstAttempt(job, cancelOther)
	res := admit(t, s, again, now)
	require.Equal(t, store.CancelledOther, res.Decision)
	require.Equal(t, waiting.ExecutionId, res.Other)
	require.NotNil(t, res.Promoted, "never published: handed back")
	require.Equal(t, waiting.ExecutionId, res.Promoted.ExecutionID)
	a, _ = active(t, s, job)
	require.Equal(t, store.Active{ExecutionID: again.ExecutionId, StartedAt: a.StartedAt, StaleAfter: a.StaleAfter}, a)
}

// A row past its stale_after holds nothing back: a first attempt takes
// over (after promoting a buffered one, against which its policy then
// applies), and the sweep finds it.
func TestStaleActive(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	now := time.Now()
	job := uuid.NewString()
	leaked := firstAttempt(job, skip)
	admit(t, s, leaked, now)
	stale := now.Add(time.Hour)
	refs, err := s.StaleActive(t.Context(), stale.Add(-time.Microsecond), 10)
	require.NoError(t, err)
	require.Empty(t, refs)
	refs, err = s.StaleActive(t.Context(), stale, 10)
	require.NoError(t, err)
	require.Equal(t, []store.ActiveRef{ref(leaked)}, refs)

	next := firstAttempt(job, skip)
	require.Equal(t, store.AdmitResult{Decision: store.Admitted}, admit(t, s, next, stale))
	a, _ := active(t, s, job)
	require.Equal(t, next.ExecutionId, a.ExecutionID)

	// Stale with one buffered: it is promoted, and a SKIP arrival is
	// skipped in its favour.
	other := uuid.NewString()
	first, waiting, late := firstAttempt(other, bufferOne), firstAttempt(other, bufferOne), firstAttempt(other, skip)
	admit(t, s, first, now)
	admit(t, s, waiting, now)
	res := admit(t, s, late, stale)
	require.Equal(t, store.Skipped, res.Decision)
	require.Equal(t, waiting.ExecutionId, res.Other)
	require.NotNil(t, res.Promoted)
	require.Equal(t, waiting.ExecutionId, res.Promoted.ExecutionID)
}

// Concurrent first attempts of one job: exactly one becomes active, the
// others are skipped naming it, whatever the interleaving.
func TestAdmitConcurrentFirstAttempts(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	now := time.Now()
	for round := range 20 {
		job := uuid.NewString()
		const n = 8
		results := make([]store.AdmitResult, n)
		reqs := make([]*dispatchv1.DispatchRequest, n)
		for i := range reqs {
			reqs[i] = firstAttempt(job, skip)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				res, err := s.Admit(t.Context(), store.Admission{Request: reqs[i], Now: now, Span: time.Hour})
				require.NoError(t, err)
				results[i] = res
			})
		}
		close(start)
		wg.Wait()
		var winner string
		for i, r := range results {
			if r.Decision == store.Admitted {
				require.Empty(t, winner, "round %d: two admitted", round)
				winner = reqs[i].ExecutionId
			}
		}
		require.NotEmpty(t, winner, "round %d: none admitted", round)
		for _, r := range results {
			if r.Decision != store.Admitted {
				require.Equal(t, store.AdmitResult{Decision: store.Skipped, Other: winner}, r)
			}
		}
		a, _ := active(t, s, job)
		require.Equal(t, winner, a.ExecutionID)
	}
}

// A duplicate's look-up tells a final execution from a pending one, so
// that the duplicate of a final attempt can still release its job.
func TestCheckReportsFinal(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	pending, over := uuid.NewString(), uuid.NewString()
	require.NoError(t, s.RecordCompleted(t.Context(), []store.CompletedAttempt{
		{ExecutionID: pending, Attempt: 1, Time: time.Now()},
		{ExecutionID: over, Attempt: 2, Final: true, Time: time.Now()},
	}))
	got, err := s.Check(t.Context(), []store.CheckRef{
		{Namespace: "alpha", ExecutionID: pending, Attempt: 1},
		{Namespace: "alpha", ExecutionID: over, Attempt: 1},
	})
	require.NoError(t, err)
	require.Equal(t, []store.CheckResult{{Completed: true}, {Completed: true, Final: true}}, got)
}
