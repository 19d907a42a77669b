package ledger_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/testkit/ledger"
)

const (
	jobA = "0190f0c4-6c1e-7a00-8000-00000000000a"
	jobB = "0190f0c4-6c1e-7a00-8000-00000000000b"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func request(job string, nominal time.Time, attempt int32) *dispatchv1.DispatchRequest {
	return &dispatchv1.DispatchRequest{
		ExecutionId: execid.For(job, nominal), JobId: job, Attempt: attempt, NominalTime: timestamppb.New(nominal),
	}
}

// clean records every slot of both jobs over [t0, t0+2s]: enqueued once at
// nominal+10ms, delivered at nominal+late(slot).
func clean(l *ledger.Ledger, late func(job string, sec int) time.Duration) {
	for _, job := range []string{jobA, jobB} {
		for sec := range 3 {
			nominal := t0.Add(time.Duration(sec) * time.Second)
			l.Enqueued(request(job, nominal, 1), rowID(job, nominal), nominal.Add(10*time.Millisecond))
			l.Delivered(job, execid.For(job, nominal), nominal.Add(late(job, sec)))
		}
	}
}

// rowID is the outbox row a slot's first attempt was published from.
func rowID(job string, nominal time.Time) string { return "row-" + execid.For(job, nominal) }

func onTime(string, int) time.Duration { return 50 * time.Millisecond }

func TestVerdicts(t *testing.T) {
	t.Parallel()
	jobs := []string{jobA, jobB}
	from, to, fault := t0, t0.Add(2*time.Second), t0.Add(time.Second)
	for _, tc := range []struct {
		name    string
		extra   func(l *ledger.Ledger)
		late    func(job string, sec int) time.Duration
		wantErr string // "" for a verdict that holds
		check   func(t *testing.T, v ledger.Verdict)
	}{
		{name: "clean", check: func(t *testing.T, v ledger.Verdict) {
			require.Equal(t, 6, v.Slots)
			require.Zero(t, v.Recovery)
		}},
		{name: "a redelivery with the same webhook-id is allowed", extra: func(l *ledger.Ledger) {
			l.Delivered(jobA, execid.For(jobA, t0), t0.Add(3*time.Second))
		}, check: func(t *testing.T, v ledger.Verdict) { require.Equal(t, 1, v.Duplicates) }},
		{name: "retries are counted, not doubles", extra: func(l *ledger.Ledger) {
			l.Enqueued(request(jobA, t0, 2), "retry-1", t0.Add(2*time.Second))
			l.Enqueued(request(jobA, t0, 3), "retry-2", t0.Add(4*time.Second))
		}, check: func(t *testing.T, v ledger.Verdict) { require.Equal(t, 2, v.Retries) }},
		{name: "a slot outside the window may arrive", extra: func(l *ledger.Ledger) {
			at := t0.Add(10 * time.Second)
			l.Enqueued(request(jobA, at, 1), rowID(jobA, at), at)
			l.Delivered(jobA, execid.For(jobA, at), at)
		}},
		{name: "a slot after the window delivered before the tap read it", extra: func(l *ledger.Ledger) {
			at := t0.Add(30 * time.Second)
			l.Delivered(jobB, execid.For(jobB, at), at.Add(100*time.Millisecond))
		}},
		{name: "a republished row is counted, not failed", extra: func(l *ledger.Ledger) {
			l.Enqueued(request(jobA, t0, 1), rowID(jobA, t0), t0.Add(3*time.Second))
			l.Delivered(jobA, execid.For(jobA, t0), t0.Add(3*time.Second))
		}, check: func(t *testing.T, v ledger.Verdict) {
			require.Len(t, v.Republished, 1)
			require.Empty(t, v.DoubleEnqueued)
			require.Equal(t, 1, v.Duplicates)
		}},
		{name: "a delivery before the nominal time", late: func(job string, sec int) time.Duration {
			if job == jobB && sec == 1 {
				return -300 * time.Millisecond
			}
			return 50 * time.Millisecond
		}, wantErr: "delivered before their nominal time"},
		{name: "a slot fired twice", extra: func(l *ledger.Ledger) {
			l.Enqueued(request(jobA, t0.Add(time.Second), 1), "another row", t0.Add(1200*time.Millisecond))
		}, wantErr: "1 slots fired twice"},
		{name: "a first attempt not from the outbox", extra: func(l *ledger.Ledger) {
			at := t0.Add(20 * time.Second)
			l.Enqueued(request(jobA, at, 1), "", at)
		}, wantErr: "without an outbox row id"},
		{name: "a delivery with another webhook-id", extra: func(l *ledger.Ledger) {
			l.Delivered(jobA, "0190f0c4-0000-5000-8000-000000000000", t0.Add(time.Second))
		}, wantErr: "of no slot"},
		{name: "a delivery with another job's webhook-id", extra: func(l *ledger.Ledger) {
			l.Delivered(jobA, execid.For(jobB, t0), t0.Add(time.Second))
		}, wantErr: "wrong ids"},
		{name: "a message with a wrong execution id", extra: func(l *ledger.Ledger) {
			r := request(jobA, t0.Add(5*time.Second), 1)
			r.ExecutionId = execid.For(jobA, t0)
			l.Enqueued(r, "m", t0.Add(5*time.Second))
		}, wantErr: "want " + execid.For(jobA, t0.Add(5*time.Second))},
		{name: "an early enqueue", extra: func(l *ledger.Ledger) {
			at := t0.Add(20 * time.Second)
			l.Enqueued(request(jobA, at, 1), rowID(jobA, at), at.Add(-10*time.Second))
		}, wantErr: "enqueued 10s early"},
		{name: "late slots set the recovery", late: func(job string, sec int) time.Duration {
			if sec == 1 {
				return 4 * time.Second
			}
			return 50 * time.Millisecond
		}, check: func(t *testing.T, v ledger.Verdict) {
			require.Equal(t, 4*time.Second, v.Recovery, "from the fault (t0+1s) to the last late delivery (t0+5s)")
			require.Equal(t, 4*time.Second, v.MaxLate)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := ledger.New()
			late := tc.late
			if late == nil {
				late = onTime
			}
			clean(l, late)
			if tc.extra != nil {
				tc.extra(l)
			}
			v := l.Check(jobs, from, to, fault)
			if tc.wantErr == "" {
				require.NoError(t, v.Err(), v.String())
			} else {
				require.ErrorContains(t, v.Err(), tc.wantErr)
			}
			if tc.check != nil {
				tc.check(t, v)
			}
		})
	}
}

func TestMissingAndNotEnqueued(t *testing.T) {
	t.Parallel()
	l := ledger.New()
	clean(l, onTime)
	// jobB's slot one second after the window's end was never seen at all.
	v := l.Check([]string{jobA, jobB}, t0, t0.Add(3*time.Second), t0)
	require.Equal(t, 8, v.Slots)
	require.Len(t, v.Missing, 2)
	require.Len(t, v.NotEnqueued, 2)
	require.ErrorContains(t, v.Err(), "2 expected slots never delivered")
	require.ErrorContains(t, v.Err(), "2 expected slots never enqueued")
}

// TestCheckQueue judges the broker side alone, as the trigger's suite does
// (no dispatcher, no target).
func TestCheckQueue(t *testing.T) {
	t.Parallel()
	jobs := []string{jobA, jobB}
	enqueueAll := func(l *ledger.Ledger, late func(job string, sec int) time.Duration) {
		for _, job := range jobs {
			for sec := range 3 {
				nominal := t0.Add(time.Duration(sec) * time.Second)
				req := request(job, nominal, 1)
				if at := nominal.Add(late(job, sec)); at.Before(nominal) {
					req.NotBefore = timestamppb.New(nominal) // fired ahead, held by the dispatcher
				}
				l.Enqueued(req, rowID(job, nominal), nominal.Add(late(job, sec)))
			}
		}
	}
	for _, tc := range []struct {
		name  string
		late  func(job string, sec int) time.Duration
		extra func(l *ledger.Ledger)
		to    time.Time // zero: t0+2s, the last second enqueued
		check func(t *testing.T, v ledger.QueueVerdict)
	}{
		{name: "clean", check: func(t *testing.T, v ledger.QueueVerdict) {
			require.Equal(t, 6, v.Slots)
			require.Empty(t, v.NotEnqueued)
			require.Empty(t, v.DoubleEnqueued)
			require.Empty(t, v.Problems)
			require.Zero(t, v.Retries)
			require.Equal(t, 50*time.Millisecond, v.MaxLate)
			require.Equal(t, []string{"0.1", "0.1", "0.1"}, v.Lateness)
		}},
		{name: "lateness per second, worst of the jobs", late: func(job string, sec int) time.Duration {
			if job == jobB && sec == 1 {
				return 3 * time.Second
			}
			return 50 * time.Millisecond
		}, check: func(t *testing.T, v ledger.QueueVerdict) {
			require.Equal(t, 3*time.Second, v.MaxLate)
			require.Equal(t, jobB+"@12:00:01", v.MaxLateSlot)
			require.Equal(t, []string{"0.1", "3.0", "0.1"}, v.Lateness)
		}},
		{name: "missing slots: the window reaches a second past what was enqueued", to: t0.Add(3 * time.Second), check: func(t *testing.T, v ledger.QueueVerdict) {
			require.Equal(t, 8, v.Slots)
			require.Len(t, v.NotEnqueued, 2)
			require.Equal(t, []string{"0.1", "0.1", "0.1", "-"}, v.Lateness)
		}},
		{name: "fired twice and republished", extra: func(l *ledger.Ledger) {
			l.Enqueued(request(jobA, t0, 1), "another row", t0.Add(time.Second))
			l.Enqueued(request(jobB, t0, 1), rowID(jobB, t0), t0.Add(time.Second))
		}, check: func(t *testing.T, v ledger.QueueVerdict) {
			require.Equal(t, []string{jobA + "@12:00:00 in 2 outbox rows"}, v.DoubleEnqueued)
			require.Equal(t, []string{jobB + "@12:00:00 x2"}, v.Republished)
		}},
		{name: "retries, early and wrong ids", extra: func(l *ledger.Ledger) {
			l.Enqueued(request(jobA, t0, 2), "", t0.Add(2*time.Second))
			at := t0.Add(2 * time.Second)
			r := request(jobB, at, 1)
			r.ExecutionId = execid.For(jobA, at)
			l.Enqueued(r, "r", at.Add(-time.Second))
		}, check: func(t *testing.T, v ledger.QueueVerdict) {
			require.Equal(t, 1, v.Retries)
			require.Len(t, v.Problems, 1)
			require.Equal(t, []string{jobB + "@12:00:02 enqueued 1s early"}, v.Early)
		}},
		{name: "enqueued ahead to be held until its time", late: func(job string, sec int) time.Duration {
			return -800 * time.Millisecond
		}, extra: func(l *ledger.Ledger) {
			// Published ahead of a slot without asking to be held.
			l.Enqueued(request(jobA, t0.Add(2*time.Second), 1), rowID(jobA, t0.Add(2*time.Second)), t0.Add(time.Second))
		}, check: func(t *testing.T, v ledger.QueueVerdict) {
			require.Equal(t, []string{jobA + "@12:00:02 enqueued 1s early"}, v.Early)
			require.Equal(t, []string{"-0.8", "-0.8", "-0.8"}, v.Lateness, "ahead is not missing; the worst of the second counts")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := ledger.New()
			late := tc.late
			if late == nil {
				late = onTime
			}
			enqueueAll(l, late)
			if tc.extra != nil {
				tc.extra(l)
			}
			to := tc.to
			if to.IsZero() {
				to = t0.Add(2 * time.Second)
			}
			tc.check(t, l.CheckQueue(jobs, t0, to, t0))
		})
	}
}

func TestEnqueuedSlotsAndOutboxRows(t *testing.T) {
	t.Parallel()
	l := ledger.New()
	clean(l, onTime)
	l.Enqueued(request(jobA, t0.Add(time.Second), 1), "another row", t0.Add(2*time.Second))
	l.Enqueued(request(jobA, t0, 1), rowID(jobA, t0), t0.Add(2*time.Second)) // republished: one row
	require.Equal(t, []int64{t0.Unix(), t0.Unix() + 1, t0.Unix() + 2}, l.EnqueuedSlots(jobA))
	require.Equal(t, map[int64]int{t0.Unix(): 1, t0.Unix() + 1: 2, t0.Unix() + 2: 1}, l.OutboxRows(jobA))
	require.Empty(t, l.EnqueuedSlots("no such job"))
}
