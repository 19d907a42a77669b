package meshbench

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/bench/internal/ledger"
	"github.com/cronmesh/cronmesh/bench/internal/target"
	"github.com/cronmesh/cronmesh/bench/internal/workload"
)

func TestP99HeldCountsUndeliveredAsLaterThanAny(t *testing.T) {
	t.Parallel()
	late := func(n int, d time.Duration) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = d
		}
		return out
	}
	tests := []struct {
		name      string
		res       ledger.Result
		want      time.Duration
		wantBound bool
	}{
		{name: "nothing due", res: ledger.Result{}, wantBound: false},
		{name: "all delivered", res: ledger.Result{Delivered: 100, Lateness: append(late(99, time.Millisecond), time.Second)}, want: time.Millisecond, wantBound: true},
		{name: "one in a hundred missing", res: ledger.Result{Delivered: 99, Missed: 1, Lateness: late(99, time.Millisecond)}, want: time.Millisecond, wantBound: true},
		{name: "two in a hundred missing", res: ledger.Result{Delivered: 98, Missed: 2, Lateness: late(98, time.Millisecond)}, wantBound: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, bounded := p99Held(tt.res)
			require.Equal(t, tt.wantBound, bounded)
			if bounded {
				require.Equal(t, tt.want, got)
			}
		})
	}
}

func TestQuickP99JudgesOnlyTheStepsSlots(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 11, 26, 10, 0, 1, 0, time.UTC)
	to := from.Add(10 * time.Second)
	step := func(start time.Time) *workload.Plan {
		p, err := workload.New(workload.Options{Rate: 2, Start: start, Window: 10 * time.Second,
			Shares: workload.Shares{workload.EverySecond: 1}, FiringFrom: start, FiringUntil: start.Add(10*time.Second - time.Millisecond)})
		require.NoError(t, err)
		return p
	}
	plan := &workload.Plan{}
	plan.Append(step(from))
	plan.Append(step(to))
	var ds []target.Delivery
	for s := range 10 {
		nominal := from.Add(time.Duration(s) * time.Second)
		for job := range int32(2) {
			ds = append(ds, target.Delivery{Job: job, WebhookID: uuid.New(), Nominal: nominal, At: nominal.Add(100 * time.Millisecond)})
		}
		// The next step's job, late, must not count for this one.
		ds = append(ds, target.Delivery{Job: 2, Nominal: nominal, At: nominal.Add(time.Minute)})
	}
	// A redelivery, later: the first arrival counts.
	ds = append(ds, target.Delivery{Job: 0, Nominal: from, At: from.Add(3 * time.Second)})
	p99, ok := quickP99(ds, plan, [2]int{0, 2}, from, to, to.Add(5*time.Second))
	require.True(t, ok)
	require.Equal(t, 100*time.Millisecond, p99)
	// Without the deliveries after the cut, 10 % of the slots are missing.
	_, ok = quickP99(ds[:len(ds)-4], plan, [2]int{0, 2}, from, to, from.Add(8*time.Second))
	require.False(t, ok)
}
