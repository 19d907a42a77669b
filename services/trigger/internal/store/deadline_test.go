package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/services/trigger/internal/firing"
)

// A fired slot's request carries its deadline (nominal + the job's
// execution_deadline) and, for a job that stops retries at its next slot,
// the firing time of the slot after it: the next slot of the same advance
// (a missed one included) or the advance's To, each plus the job's spread
// offset. The dispatcher enforces both without the schedule.
func TestCommitCarriesTheDeadlines(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, d, spread := e.setupSpread(t, func(j *registryv1.Job) {
		j.ExecutionDeadline = durationpb.New(time.Hour)
		j.StopRetriesAtNextSlot = true
		j.OverlapPolicy = registryv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE
	})
	slots := []firing.Slot{
		{Nominal: d.NextFire, Kind: firing.KindCatchUp},
		{Nominal: d.NextFire.Add(5 * time.Minute), Kind: firing.KindMissed, Reason: "older than the catch-up window"},
		{Nominal: d.NextFire.Add(10 * time.Minute), Kind: firing.KindScheduled},
	}
	to := d.NextFire.Add(15 * time.Minute)
	_, err := e.store.Commit(t.Context(), fences(1), []firing.Advance{{Due: d, Slots: slots, To: to}}, slots[2].Nominal.Add(spread))
	require.NoError(t, err)

	var reqs []*dispatchv1.DispatchRequest
	for _, row := range e.outbox(t) {
		req := &dispatchv1.DispatchRequest{}
		if proto.Unmarshal(row.Payload, req) == nil && req.ExecutionId != "" {
			reqs = append(reqs, req)
		}
	}
	require.Len(t, reqs, 2)
	require.Equal(t, slots[0].Nominal.Add(time.Hour), reqs[0].DeadlineTime.AsTime())
	require.Equal(t, slots[1].Nominal.Add(spread), reqs[0].NextSlotTime.AsTime(), "the next slot, though missed")
	require.Equal(t, slots[2].Nominal.Add(time.Hour), reqs[1].DeadlineTime.AsTime())
	require.Equal(t, to.Add(spread), reqs[1].NextSlotTime.AsTime(), "the advance's next fire time")
	for _, req := range reqs {
		require.Equal(t, registryv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE, req.OverlapPolicy, "the job's overlap policy")
	}
}

// The schedule's last slot has no next slot; a run-now has none either.
func TestCommitLastSlotHasNoNextSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, d := e.setup(t, func(j *registryv1.Job) { j.StopRetriesAtNextSlot = true })
	_, err := e.store.Commit(t.Context(), fences(1), []firing.Advance{{
		Due: d, Slots: []firing.Slot{{Nominal: d.NextFire, Kind: firing.KindScheduled}},
	}}, d.NextFire)
	require.NoError(t, err)
	rows := e.outbox(t)
	require.Len(t, rows, 1)
	req := &dispatchv1.DispatchRequest{}
	require.NoError(t, proto.Unmarshal(rows[0].Payload, req))
	require.Nil(t, req.NextSlotTime)
	require.Nil(t, req.DeadlineTime, "no execution_deadline, no deadline")
}
