package firing

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPaceUsualSecond: the usual second is the mean of the whole seconds
// before now's within PaceWindow, empty seconds counted as 0, never the
// seconds before the run started nor the one being committed.
func TestPaceUsualSecond(t *testing.T) {
	t.Parallel()
	p := newPace(t0.Add(300*time.Millisecond), 5*time.Second)
	require.Zero(t, p.usual(t0.Add(900*time.Millisecond)), "no whole second yet")

	for s := 1; s <= 4; s++ {
		for range 10 {
			p.add(t0.Add(time.Duration(s)*time.Second + 250*time.Millisecond))
		}
	}
	p.add(t0.Add(5 * time.Second)) // now's second: not counted yet
	// Seconds 1-4 since the run started in second 0, 10 jobs each.
	require.InDelta(t, 10.0, p.usual(t0.Add(5500*time.Millisecond)), 1e-9)
	// At 8.5 s, seconds 1-7 count: 40 + 1 jobs over 7 seconds.
	require.InDelta(t, 41.0/7, p.usual(t0.Add(8500*time.Millisecond)), 1e-9)
	// At 20 s the window is 10-19: nothing committed there.
	require.Zero(t, p.usual(t0.Add(20*time.Second)))
	// A count older than the ring holds is dropped, not taken for a recent
	// second sharing its entry.
	p.add(t0.Add(20 * time.Second))
	p.add(t0.Add(20*time.Second - time.Duration(len(p.ring))*time.Second))
	require.InDelta(t, 0.1, p.usual(t0.Add(21*time.Second)), 1e-9)
}

// TestPaceKeepsCommitsAhead: jobs committed ahead of their second (a
// crowd) count from that second on, not before.
func TestPaceKeepsCommitsAhead(t *testing.T) {
	t.Parallel()
	p := newPace(t0.Add(-time.Minute), 5*time.Second)
	for range 30 {
		p.add(t0.Add(2 * time.Second))
	}
	require.Zero(t, p.usual(t0.Add(time.Second)))
	require.InDelta(t, 3.0, p.usual(t0.Add(3*time.Second)), 1e-9, "30 jobs over the 10 seconds 53-2")
	// Commits a lookahead ahead do not take the entries of the window.
	for range 50 {
		p.add(t0.Add(8 * time.Second))
	}
	require.InDelta(t, 3.0, p.usual(t0.Add(3*time.Second)), 1e-9, "commits 5 s ahead")
}

// TestEngineEverySecondLoadIsNoCrowd: a node's every-second crons hold
// CrowdSize slots in each second. By size alone each second is a crowd and
// the jobs are committed up to CrowdLead ahead, one slot after the other;
// with CrowdFactor the node's usual second is as large, and after the
// first seconds each slot keeps its commit time, Lead ahead.
func TestEngineEverySecondLoadIsNoCrowd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		factor  float64
		crowded bool
	}{
		{name: "size alone", factor: 0, crowded: true},
		{name: "with the factor", factor: 3, crowded: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var dues []Due
			for i := range 4 {
				dues = append(dues, due(newJob(fmt.Sprintf("s%d", i), everySched(time.Second, t0)), 0, t0.Add(time.Second)))
			}
			store := newFakeStore(dues...)
			lead := 500 * time.Millisecond
			h := startEngine(t, store, newFakeOwnership(ownAll(1)), func(o *Options) {
				o.Lead = lead
				o.CrowdSize, o.CrowdFactor, o.CrowdLead = 3, tc.factor, 2*time.Second
			})
			for range 150 {
				h.advance(100 * time.Millisecond)
			}
			var ahead time.Duration // the most a slot was committed before its time, after the first 5 s
			for _, c := range store.calls() {
				if c.fireTime.Before(t0.Add(5 * time.Second)) {
					continue
				}
				for _, adv := range c.advances {
					for _, s := range adv.Slots {
						ahead = max(ahead, s.Nominal.Sub(c.fireTime))
					}
				}
			}
			require.NotZero(t, ahead, "nothing committed after 5 s")
			if tc.crowded {
				require.Greater(t, ahead, lead, "committed as crowds")
			} else {
				require.LessOrEqual(t, ahead, lead, "committed as crowds")
				require.Zero(t, h.metric("trigger_crowd_seconds"))
			}
		})
	}
}

// TestEngineCrowdIsASpikeOverTheUsualSecond: with CrowdFactor, a second
// is a crowd when it holds that many times the node's usual second (here
// 2 every-second jobs): 6 hourly jobs on one second are, and start
// CrowdLead ahead; 3 are not, though as many as CrowdSize, and keep their
// commit time.
func TestEngineCrowdIsASpikeOverTheUsualSecond(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		spike       int
		firstCommit time.Duration // of the spike due at 8 s
	}{
		{name: "three times the usual second", spike: 6, firstCommit: 6 * time.Second},
		{name: "below three times", spike: 3, firstCommit: 7500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dues := []Due{
				due(newJob("s0", everySched(time.Second, t0)), 0, t0.Add(time.Second)),
				due(newJob("s1", everySched(time.Second, t0)), 0, t0.Add(time.Second)),
			}
			var spike []string
			for i := range tc.spike {
				id := fmt.Sprintf("spike-%d", i)
				spike = append(spike, id)
				dues = append(dues, hourly(id, 0, t0.Add(8*time.Second)))
			}
			store := newFakeStore(dues...)
			h := startEngine(t, store, newFakeOwnership(ownAll(1)), func(o *Options) {
				o.Lead = 500 * time.Millisecond
				o.CrowdSize, o.CrowdFactor, o.CrowdLead = 3, 3, 2*time.Second
			})
			for h.clock.Now().Before(t0.Add(tc.firstCommit - 100*time.Millisecond)) {
				h.advance(100 * time.Millisecond) // in steps, as time passes: the usual second is what was committed
			}
			h.advanceTo(tc.firstCommit - time.Millisecond)
			require.NotContains(t, committedJobs(store.calls()), spike[0], "committed before %v", tc.firstCommit)
			h.advanceTo(tc.firstCommit)
			require.Subset(t, committedJobs(store.calls()), spike, "not committed at %v", tc.firstCommit)
		})
	}
}
