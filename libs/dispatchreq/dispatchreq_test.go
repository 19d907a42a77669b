package dispatchreq_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/dispatchreq"
)

func TestNewCarriesTheJobAndTheSlot(t *testing.T) {
	t.Parallel()
	maxRetries := int32(3)
	job := &registryv1.Job{
		Id: "ignored: the slot names the job", Namespace: "team-a", DisplayName: "nightly", Version: 9,
		Target:                &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: "https://example.test/hook"}}},
		RetryPolicy:           &registryv1.RetryPolicy{MaxRetries: &maxRetries},
		Priority:              registryv1.Priority_PRIORITY_HIGH,
		Labels:                map[string]string{"team": "a"},
		OverlapPolicy:         registryv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE,
		PauseAfterDeadLetters: 4,
	}
	nominal := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC)
	fire := nominal.Add(3 * time.Millisecond)
	got := dispatchreq.New(job, dispatchreq.Slot{
		ExecutionID: "exec-1", JobID: "job-1", Version: 7, Nominal: nominal, Fire: fire,
		Kind: dispatchv1.TriggerKind_TRIGGER_KIND_CATCH_UP, RerunOf: "exec-0", Overridden: []string{"body"},
	})
	want := &dispatchv1.DispatchRequest{
		ExecutionId: "exec-1", JobId: "job-1", Namespace: "team-a", Attempt: 1,
		NominalTime: timestamppb.New(nominal), FireTime: timestamppb.New(fire),
		TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_CATCH_UP,
		Target:      job.GetTarget(), RetryPolicy: job.GetRetryPolicy(), Priority: registryv1.Priority_PRIORITY_HIGH,
		JobVersion: 7, JobDisplayName: "nightly", JobLabels: map[string]string{"team": "a"},
		RerunOfExecutionId: "exec-0", OverriddenFields: []string{"body"},
		OverlapPolicy:         registryv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE,
		PauseAfterDeadLetters: 4,
	}
	require.True(t, proto.Equal(want, got), "got %v", got)
}

func TestNewCarriesTheDeadlines(t *testing.T) {
	t.Parallel()
	nominal := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC)
	next := nominal.Add(5*time.Minute + 7*time.Second)
	tests := []struct {
		name               string
		deadline           time.Duration
		stopAtNext         bool
		nextSlot           time.Time
		wantDeadline, want time.Time
	}{
		{"none", 0, false, next, time.Time{}, time.Time{}},
		{"execution deadline", time.Hour, false, next, nominal.Add(time.Hour), time.Time{}},
		{"next slot", 0, true, next, time.Time{}, next},
		{"both", time.Hour, true, next, nominal.Add(time.Hour), next},
		{"no next slot", 0, true, time.Time{}, time.Time{}, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := &registryv1.Job{StopRetriesAtNextSlot: tt.stopAtNext}
			if tt.deadline != 0 {
				job.ExecutionDeadline = durationpb.New(tt.deadline)
			}
			got := dispatchreq.New(job, dispatchreq.Slot{Nominal: nominal, NextSlotFire: tt.nextSlot})
			require.Equal(t, !tt.wantDeadline.IsZero(), got.DeadlineTime != nil)
			if got.DeadlineTime != nil {
				require.Equal(t, tt.wantDeadline, got.DeadlineTime.AsTime())
			}
			require.Equal(t, !tt.want.IsZero(), got.NextSlotTime != nil)
			if got.NextSlotTime != nil {
				require.Equal(t, tt.want, got.NextSlotTime.AsTime())
			}
		})
	}
}

// A backfill's slots are old on purpose: their deadline counts from when
// the backfill fired them.
func TestBackfillDeadlineCountsFromTheFireTime(t *testing.T) {
	t.Parallel()
	nominal := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	fire := nominal.Add(72 * time.Hour)
	job := &registryv1.Job{ExecutionDeadline: durationpb.New(time.Hour)}
	got := dispatchreq.New(job, dispatchreq.Slot{Nominal: nominal, Fire: fire, Kind: dispatchv1.TriggerKind_TRIGGER_KIND_BACKFILL})
	require.Equal(t, fire.Add(time.Hour), got.DeadlineTime.AsTime())
	got = dispatchreq.New(job, dispatchreq.Slot{Nominal: nominal, Fire: fire, Kind: dispatchv1.TriggerKind_TRIGGER_KIND_CATCH_UP})
	require.Equal(t, nominal.Add(time.Hour), got.DeadlineTime.AsTime())
}

func TestNewCarriesNotBeforeOnlyWhenGiven(t *testing.T) {
	t.Parallel()
	job := &registryv1.Job{Namespace: "team-a"}
	nominal := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC)
	slot := dispatchreq.Slot{ExecutionID: "exec-1", JobID: "job-1", Nominal: nominal, Fire: nominal.Add(-time.Second),
		Kind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED}

	require.Nil(t, dispatchreq.New(job, slot).GetNotBefore(), "a slot fired at its time is not held")

	slot.NotBefore = nominal.Add(250 * time.Millisecond)
	require.Equal(t, slot.NotBefore, dispatchreq.New(job, slot).GetNotBefore().AsTime())
}
