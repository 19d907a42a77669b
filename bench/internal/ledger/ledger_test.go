package ledger_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/bench/internal/ledger"
	"github.com/cronmesh/cronmesh/bench/internal/target"
	"github.com/cronmesh/cronmesh/bench/internal/workload"
	"github.com/cronmesh/cronmesh/libs/execid"
)

func TestCheckCountsMissedTwiceAndLateness(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	to := from.Add(10 * time.Second)
	plan := workload.Constant(2, workload.EverySecond, from, 10*time.Second)
	ids := []string{uuid.NewString(), uuid.NewString()}
	deliver := func(job int, nominal time.Time, late time.Duration) target.Delivery {
		return target.Delivery{Job: int32(job), WebhookID: uuid.MustParse(execid.For(ids[job], nominal)), At: nominal.Add(late)}
	}
	var ds []target.Delivery
	for s := range 10 {
		at := from.Add(time.Duration(s) * time.Second)
		ds = append(ds, deliver(0, at, time.Duration(s+1)*100*time.Millisecond))
		if s != 4 { // job 1 misses its slot at second 4
			ds = append(ds, deliver(1, at, 50*time.Millisecond))
		}
	}
	ds = append(ds,
		deliver(0, from.Add(3*time.Second), 2*time.Second),     // delivered twice
		deliver(1, from.Add(-2*time.Second), 0),                // before the window: resolved, not counted
		target.Delivery{Job: 1, WebhookID: uuid.New(), At: to}, // no slot of job 1
		target.Delivery{Job: -1, At: to},                       // malformed
	)
	r := ledger.Check(ledger.Input{Plan: plan, JobIDs: ids, From: from, To: to, SpanFrom: from.Add(-time.Minute), Deliveries: ds})
	require.Equal(t, 20, r.Expected)
	require.Equal(t, 19, r.Delivered)
	require.Equal(t, 1, r.Missed)
	require.Len(t, r.MissedSample, 1)
	require.Contains(t, r.MissedSample[0], "job 1")
	require.Equal(t, 1, r.DeliveredTwice)
	require.Equal(t, 1, r.ExtraDeliveries)
	require.Equal(t, 2, r.Unresolved)
	require.Len(t, r.Lateness, 19)
	require.Equal(t, time.Second, r.Lateness[len(r.Lateness)-1], "the first arrival of a slot counts, not the duplicate")
	require.Equal(t, 50*time.Millisecond, r.Lateness[0])
	// 12:00:00 is a top-of-minute second: its two slots are kept apart.
	require.Equal(t, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}, r.LateTop)
	require.Equal(t, r.LateTop, r.TopByTenth[0])
	require.Len(t, r.LateRest, 17)
	require.Len(t, r.LateByTenth[0], 0, "the first tenth holds only the top-of-minute second")
	require.Len(t, r.LateByTenth[1], 2)
}

func TestCheckExpectsNoSlotOutsideStartAndEnd(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	plan, err := workload.New(workload.Options{Rate: 10, Start: from, Window: 10 * time.Second,
		Shares: workload.Shares{workload.EverySecond: 1}, FiringFrom: from.Add(2 * time.Second), FiringUntil: from.Add(5*time.Second - time.Millisecond)})
	require.NoError(t, err)
	r := ledger.Check(ledger.Input{Plan: plan, JobIDs: make([]string, len(plan.Jobs)), From: from, To: from.Add(10 * time.Second), SpanFrom: from})
	require.Equal(t, 10*3, r.Expected, "seconds 2, 3 and 4 of ten jobs")
	require.Equal(t, r.Expected, r.Missed)
}
