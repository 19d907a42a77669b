package pipeline

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
)

// TestEventExcerpt: an event's excerpt is valid UTF-8 of at most
// MaxEventExcerpt bytes, cut before a character that would straddle the
// limit.
func TestEventExcerpt(t *testing.T) {
	t.Parallel()
	euro := "€" // 3 bytes
	tests := []struct {
		name, in, want string
	}{
		{"short", "ok", "ok"},
		{"exactly the cap", strings.Repeat("a", MaxEventExcerpt), strings.Repeat("a", MaxEventExcerpt)},
		{"cut between characters", strings.Repeat("a", MaxEventExcerpt-1) + euro, strings.Repeat("a", MaxEventExcerpt-1)},
		{"invalid bytes replaced first", "a\xffb\x00", "a\uFFFDb\uFFFD"},
		{"64 KiB of multi-byte characters", strings.Repeat(euro, 64<<10/3), strings.Repeat(euro, MaxEventExcerpt/3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := newEvent(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED, &dispatchv1.DispatchRequest{}, time.Now(),
				attemptInfo{start: time.Now(), status: 500, excerpt: tt.in}, "", "")
			require.Equal(t, tt.want, ev.ResponseExcerpt)
			require.LessOrEqual(t, len(ev.ResponseExcerpt), MaxEventExcerpt)
			require.True(t, utf8.ValidString(ev.ResponseExcerpt))
			require.False(t, ev.RetryScheduled, "no retry given")
		})
	}
}

// TestEventCarriesTheRunsOrigin: every event of an execution carries what
// its request says of a manual run (the execution it re-runs, what it
// overrode), whatever the kind, so the history has them from the first
// event it sees.
func TestEventCarriesTheRunsOrigin(t *testing.T) {
	t.Parallel()
	req := &dispatchv1.DispatchRequest{
		ExecutionId: "0190f0c4-6c1e-7a00-8000-000000000002", RerunOfExecutionId: "0190f0c4-6c1e-7a00-8000-000000000001",
		OverriddenFields: []string{"target", "headers"},
	}
	for _, kind := range []eventsv1.ExecutionEventKind{
		eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED,
		eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD,
		eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_CANCELLED,
	} {
		ev := newEvent(kind, req, time.Now(), attemptInfo{}, "", "")
		require.Equal(t, req.RerunOfExecutionId, ev.RerunOfExecutionId, kind.String())
		require.Equal(t, req.OverriddenFields, ev.OverriddenFields, kind.String())
	}
	plain := newEvent(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, &dispatchv1.DispatchRequest{}, time.Now(), attemptInfo{}, "", "")
	require.Empty(t, plain.RerunOfExecutionId)
	require.Empty(t, plain.OverriddenFields)
}
