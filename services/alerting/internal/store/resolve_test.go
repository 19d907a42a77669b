package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/services/alerting/internal/rules"
	"github.com/cronmesh/cronmesh/services/alerting/internal/store"
)

// TestResolveNoSuccessByHand: a no-success incident resolved by hand does
// not open again at the next sweep although the job still has no success;
// its rule's window counts from the resolution, and a whole window later
// a new incident opens. Resolving again changes nothing; another
// namespace's incident is not found.
func TestResolveNoSuccessByHand(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.Migrated(t, store.Migrations)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := t0
	s := store.New(store.Options{Pool: pool, Now: func() time.Time { return now }})
	ctx := context.Background()

	_, err := s.ApplyJobEvents(ctx, []*eventsv1.JobEvent{jobEvent("j", 1, eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, t0, time.Minute)}, t0)
	require.NoError(t, err)
	set := rules.NewSet([]*rules.Rule{{ID: uuid.NewString(), Namespace: "ns", Kind: rules.NoSuccess, Within: time.Hour, CreateTime: t0}})
	open := func() []*alertingv1.Incident {
		list, err := s.ListIncidents(ctx, "ns", store.IncidentFilter{State: alertingv1.IncidentState_INCIDENT_STATE_OPEN}, 10)
		require.NoError(t, err)
		return list
	}

	n, err := s.NoSuccess(ctx, set, t0.Add(2*time.Hour), 100)
	require.NoError(t, err)
	require.Equal(t, 1, n, "two hours without a success")
	inc := open()[0]

	now = t0.Add(2*time.Hour + time.Minute)
	resolved, err := s.ResolveIncident(ctx, "ns", inc.Id, "key-1")
	require.NoError(t, err)
	require.Equal(t, alertingv1.IncidentState_INCIDENT_STATE_RESOLVED, resolved.State)
	require.Equal(t, "resolved by key key-1", resolved.ResolveReason)
	require.Equal(t, "key-1", resolved.ResolvedBy)
	require.Equal(t, now, resolved.ResolveTime.AsTime())

	now = t0.Add(3 * time.Hour)
	again, err := s.ResolveIncident(ctx, "ns", inc.Id, "key-2")
	require.NoError(t, err)
	require.Equal(t, "key-1", again.ResolvedBy, "resolving a resolved incident changes nothing")
	require.Equal(t, resolved.ResolveTime.AsTime(), again.ResolveTime.AsTime())
	_, err = s.ResolveIncident(ctx, "other", inc.Id, "key-3")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.ResolveIncident(ctx, "ns", uuid.NewString(), "key-1")
	require.ErrorIs(t, err, store.ErrNotFound)

	n, err = s.NoSuccess(ctx, set, t0.Add(2*time.Hour+30*time.Minute), 100)
	require.NoError(t, err)
	require.Zero(t, n, "the window counts from the manual resolution")
	require.Empty(t, open())

	n, err = s.NoSuccess(ctx, set, t0.Add(3*time.Hour+2*time.Minute), 100)
	require.NoError(t, err)
	require.Equal(t, 1, n, "a whole window after the resolution without a success")
	require.NotEqual(t, inc.Id, open()[0].Id)
}
