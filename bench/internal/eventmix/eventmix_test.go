package eventmix_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cronmesh/cronmesh/bench/internal/eventmix"
	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/execevent"
)

func TestNewMixRefusesAShareOutsideZeroToOne(t *testing.T) {
	t.Parallel()
	for _, share := range []float64{-0.01, 1.01} {
		_, err := eventmix.NewMix(share)
		require.Error(t, err, "share %v", share)
	}
	for _, share := range []float64{0, 0.01, 1} {
		_, err := eventmix.NewMix(share)
		require.NoError(t, err, "share %v", share)
	}
}

func TestSlowAttemptsAreSpreadEvenlyAndCounted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		share float64
		n     int
		slow  int
	}{
		{name: "none", share: 0, n: 1000, slow: 0},
		{name: "one in a hundred", share: 0.01, n: 1000, slow: 10},
		{name: "every attempt, the old mix", share: 1, n: 1000, slow: 1000},
		{name: "a third", share: 1.0 / 3, n: 999, slow: 333},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := eventmix.NewMix(tc.share)
			require.NoError(t, err)
			slow, longestQuickRun, run := 0, 0, 0
			for i := range tc.n {
				if m.Slow(i) {
					slow++
					run = 0
				} else {
					run++
					longestQuickRun = max(longestQuickRun, run)
				}
			}
			require.Equal(t, tc.slow, slow)
			require.Equal(t, tc.slow, m.SlowCount(tc.n))
			require.Equal(t, tc.n+tc.slow, m.Events(tc.n))
			if tc.share > 0 {
				require.LessOrEqual(t, float64(longestQuickRun), 1/tc.share, "slow attempts are spread, not bunched")
			}
		})
	}
}

func attempt() eventmix.Attempt {
	nominal := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	return eventmix.Attempt{
		Request: &dispatchv1.DispatchRequest{
			ExecutionId: "exe", JobId: "job", Namespace: "bench", Attempt: 1,
			NominalTime: timestamppb.New(nominal), FireTime: timestamppb.New(nominal.Add(time.Millisecond)),
			TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED, JobDisplayName: "bench job",
			JobLabels: map[string]string{"team": "a"},
		},
		Start: nominal.Add(2 * time.Millisecond), Duration: 35 * time.Millisecond,
		Outcome: eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, Status: 200, Excerpt: "ok",
		Trace: eventmix.NewTrace(),
	}
}

func TestAQuickAttemptEmitsItsOutcomeAlone(t *testing.T) {
	t.Parallel()
	a := attempt()
	events := eventmix.Events(a, false)
	require.Len(t, events, 1)
	out := events[0]
	require.Equal(t, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, out.GetKind())
	require.True(t, out.GetStartTime().AsTime().Equal(a.Start), "the outcome carries the start a STARTED would have")
	require.True(t, out.GetOccurTime().AsTime().Equal(a.Start.Add(a.Duration)), "the outcome occurs at the attempt's end")
	require.Equal(t, a.Duration, out.GetDuration().AsDuration())
	require.Equal(t, int32(200), out.GetResponseStatus())
	require.True(t, proto.Equal(a.Request.GetFireTime(), out.GetFireTime()))
	require.Equal(t, a.Trace.ID, out.GetTraceId())
	require.Equal(t, a.Trace.TraceParent, out.GetTraceContext()["traceparent"])
	require.Equal(t, "execution.succeeded", execevent.RoutingKey(events))
}

func TestASlowAttemptEmitsStartedThenItsOutcome(t *testing.T) {
	t.Parallel()
	a := attempt()
	events := eventmix.Events(a, true)
	require.Len(t, events, 2)
	started, out := events[0], events[1]
	require.Equal(t, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, started.GetKind())
	require.Equal(t, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, out.GetKind())
	require.True(t, started.GetOccurTime().AsTime().Equal(a.Start), "STARTED is stamped with the start")
	require.Nil(t, started.GetDuration())
	require.NotEqual(t, started.GetEventId(), out.GetEventId())

	// The outcome carries every field its STARTED sets, as the
	// dispatcher's test of newEvent requires.
	shared := proto.Clone(out).(*eventsv1.ExecutionEvent)
	shared.EventId, shared.Kind, shared.OccurTime = started.GetEventId(), started.GetKind(), started.GetOccurTime()
	shared.Duration, shared.ResponseStatus, shared.ResponseExcerpt = nil, 0, ""
	require.True(t, proto.Equal(started, shared), "STARTED %v\noutcome %v", started, out)
}
