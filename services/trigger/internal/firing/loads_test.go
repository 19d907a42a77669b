package firing

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lastLoad returns the After of each partition in the engine's last
// DueJobs call, by partition.
func lastLoad(t *testing.T, store *fakeStore) map[int]time.Time {
	t.Helper()
	store.mu.Lock()
	defer store.mu.Unlock()
	require.NotEmpty(t, store.dueLoads)
	out := make(map[int]time.Time)
	for _, l := range store.dueLoads[len(store.dueLoads)-1] {
		out[l.Partition] = l.After
	}
	return out
}

// TestEngineLoadsOnlyNewSlots: after a whole read, each load of a
// partition whose jobs did not change reads only the slots after the
// previous load's horizon, so a job due within the lookahead is read once.
func TestEngineLoadsOnlyNewSlots(t *testing.T) {
	t.Parallel()
	store := newFakeStore(hourly("a", 0, t0.Add(3*time.Second)), hourly("b", 1, t0.Add(4500*time.Millisecond)))
	h := startEngine(t, store, newFakeOwnership(ownAll(2)), nil)
	require.Equal(t, map[int]time.Time{0: {}, 1: {}}, lastLoad(t, store), "the first load reads whole")

	h.advance(time.Second)
	want := t0.Add(DefaultLookahead)
	require.Equal(t, map[int]time.Time{0: want, 1: want}, lastLoad(t, store))
	h.advance(time.Second)
	want = t0.Add(time.Second + DefaultLookahead)
	require.Equal(t, map[int]time.Time{0: want, 1: want}, lastLoad(t, store))
	require.Equal(t, 2.0, h.metric("trigger_loaded_jobs_total"), "each job read once")
	require.Equal(t, 2.0, h.metric("trigger_partition_reads_total", "whole"))

	h.advance(3 * time.Second)
	require.Equal(t, []string{"a", "b"}, committedJobs(store.calls()))
}

// TestEngineReadsChangedPartitionsWhole: a partition JobChanges reports is
// read whole at the next load, and so is every partition when it reports
// all; a job changed there to an earlier slot fires at that slot.
func TestEngineReadsChangedPartitionsWhole(t *testing.T) {
	t.Parallel()
	store := newFakeStore(hourly("a", 0, t0.Add(time.Hour)), hourly("b", 1, t0.Add(time.Hour)))
	h := startEngine(t, store, newFakeOwnership(ownAll(2)), nil)
	h.advance(time.Second)

	// The projection moved b's next slot to t0+3s, within what the loads
	// read already.
	moved := hourly("b", 1, t0.Add(3*time.Second))
	moved.Version, moved.Job.Version = 2, 2
	store.put(moved)
	h.changes.change(1)
	h.advance(time.Second)
	require.Equal(t, map[int]time.Time{0: t0.Add(time.Second + DefaultLookahead), 1: {}}, lastLoad(t, store))
	require.Empty(t, store.calls())
	h.advance(time.Second)
	require.Equal(t, []string{"b"}, committedJobs(store.calls()))

	h.changes.change()
	h.advance(time.Second)
	require.Equal(t, map[int]time.Time{0: {}, 1: {}}, lastLoad(t, store))
}

// TestEngineFiresEverySlotOfLongPeriodsFromNewSlots: jobs whose period is
// longer than the lookahead leave memory after each slot and come back by
// a later load's new slots; with no change reported after the first load,
// every slot fires exactly once, also with a Lead and when a commit ends
// while a load is in flight.
func TestEngineFiresEverySlotOfLongPeriodsFromNewSlots(t *testing.T) {
	t.Parallel()
	periods := []time.Duration{2 * time.Second, 5 * time.Second, 7 * time.Second, 13 * time.Second, 61 * time.Second}
	var dues []Due
	for i, every := range periods {
		first := t0.Add(every)
		dues = append(dues, due(newJob(fmt.Sprintf("every-%s", every), everySched(every, t0)), i%3, first))
	}
	store := newFakeStore(dues...)
	h := startEngine(t, store, newFakeOwnership(ownAll(3)), func(o *Options) {
		o.Lead = 500 * time.Millisecond
		o.LoadInterval = 700 * time.Millisecond // out of step with the slots
		o.WholeLoadInterval = time.Hour
	})
	const span = 3 * time.Minute
	for range span / (100 * time.Millisecond) {
		h.advance(100 * time.Millisecond)
	}
	for _, every := range periods {
		slots := store.slotsOf(fmt.Sprintf("every-%s", every))
		// Committed up to the Lead before their time.
		want := int((span + 500*time.Millisecond) / every)
		require.Len(t, slots, want, "every %s", every)
		for i, s := range slots {
			require.Equal(t, t0.Add(time.Duration(i+1)*every), s.Nominal, "every %s", every)
			require.Equal(t, KindScheduled, s.Kind, "every %s", every)
		}
	}
	require.Equal(t, 0.0, h.metric("trigger_stale_total"))
	require.Equal(t, 3.0, h.metric("trigger_partition_reads_total", "whole"), "one whole read of each partition")
}

// TestEngineWholeLoadInterval: a change JobChanges never reported (a row
// edited by hand) is read by the periodic whole read.
func TestEngineWholeLoadInterval(t *testing.T) {
	t.Parallel()
	store := newFakeStore(hourly("a", 0, t0.Add(time.Hour)))
	h := startEngine(t, store, newFakeOwnership(ownAll(1)), func(o *Options) {
		o.WholeLoadInterval = 10 * time.Second
	})
	h.advance(time.Second)
	store.put(hourly("b", 0, t0.Add(3*time.Second), withCatchUp(time.Minute)))
	for range 5 {
		h.advance(time.Second)
	}
	require.Empty(t, store.calls())
	for range 5 {
		h.advance(time.Second)
	}
	require.Equal(t, []string{"b"}, committedJobs(store.calls()))
	require.Equal(t, []Slot{{Nominal: t0.Add(3 * time.Second), Kind: KindCatchUp}}, store.slotsOf("b"))
}

// TestEngineReadsWholeAfterOwnershipChanges: a partition taken away and
// given back, at a new epoch or at the same one (a lease in doubt for a
// moment), is read whole: its entries left memory meanwhile.
func TestEngineReadsWholeAfterOwnershipChanges(t *testing.T) {
	t.Parallel()
	store := newFakeStore(hourly("a", 0, t0.Add(time.Hour)), hourly("b", 1, t0.Add(time.Hour)))
	own := newFakeOwnership(ownAll(2))
	h := startEngine(t, store, own, nil)
	h.advance(time.Second)
	require.False(t, lastLoad(t, store)[1].IsZero())

	own.set(map[int]int64{0: 1})
	h.sync()
	own.set(map[int]int64{0: 1, 1: 1}) // back, at the same epoch
	h.sync()
	got := lastLoad(t, store)
	require.False(t, got[0].IsZero())
	require.True(t, got[1].IsZero())

	h.advance(time.Second)
	own.mu.Lock()
	own.owned = map[int]int64{0: 2, 1: 1} // a new epoch, with no signal
	own.mu.Unlock()
	h.advance(time.Second)
	got = lastLoad(t, store)
	require.True(t, got[0].IsZero())
	require.False(t, got[1].IsZero())
}

// TestEngineReadsWholeAfterAStaleCommit: a job whose row changed under its
// commit is read again with its partition, even with no change reported.
func TestEngineReadsWholeAfterAStaleCommit(t *testing.T) {
	t.Parallel()
	store := newFakeStore(hourly("a", 0, t0.Add(2*time.Second)))
	h := startEngine(t, store, newFakeOwnership(ownAll(1)), nil)
	h.advance(time.Second)
	changed := hourly("a", 0, t0.Add(2*time.Second))
	changed.Version, changed.Job.Version = 2, 2
	store.put(changed) // not reported: the load at 2s reads it anyway
	h.advance(time.Second)
	require.Equal(t, 1.0, h.metric("trigger_stale_total"))
	h.advance(time.Second)
	require.True(t, lastLoad(t, store)[0].IsZero())
	require.Equal(t, []string{"a"}, committedJobs(store.calls()))
	require.Equal(t, int64(2), store.calls()[1].advances[0].Due.Version)
}

// TestEngineKeepsWhatALoadCoveredAcrossAClockStep: a job advanced to a
// slot beyond its commit's horizon but within what a load already read of
// its partition stays in memory, since no later load reads that slot. The
// node's clock stepping back between the load and the commit's end makes
// the gap.
func TestEngineKeepsWhatALoadCoveredAcrossAClockStep(t *testing.T) {
	t.Parallel()
	store := newFakeStore(due(newJob("a", everySched(6*time.Second, t0.Add(2*time.Second))), 0, t0.Add(2*time.Second)))
	h := startEngine(t, store, newFakeOwnership(ownAll(1)), func(o *Options) { o.WholeLoadInterval = time.Hour })
	entered, release := make(chan struct{}), make(chan struct{})
	store.mu.Lock()
	store.commitEntered, store.commitRelease = entered, release
	store.mu.Unlock()

	h.clock.Set(t0.Add(2 * time.Second)) // the slot of 2s: its commit waits
	<-entered
	store.mu.Lock()
	store.commitEntered, store.commitRelease = nil, nil
	store.mu.Unlock()
	h.advanceInFlight(time.Second) // the load at 3s reads the slots in (7s, 8s]
	require.Equal(t, t0.Add(2*time.Second+DefaultLookahead), lastLoad(t, store)[0])
	h.clock.Set(t0.Add(2200 * time.Millisecond)) // a step back
	close(release)                               // the commit ends at 2.2s: its horizon is 7.2s, the next slot 8s
	h.sync()
	for range 70 {
		h.advance(100 * time.Millisecond)
	}
	require.Equal(t, []Slot{
		{Nominal: t0.Add(2 * time.Second), Kind: KindScheduled},
		{Nominal: t0.Add(8 * time.Second), Kind: KindScheduled},
	}, store.slotsOf("a"))
}

// TestEngineLoadCutAtTheLimitIsReadAgain: a load that returned LoadLimit
// rows may have left jobs out, so the next load reads the partition from
// where the cut one started.
func TestEngineLoadCutAtTheLimitIsReadAgain(t *testing.T) {
	t.Parallel()
	store := newFakeStore(hourly("a", 0, t0.Add(3*time.Second)), hourly("b", 0, t0.Add(4*time.Second)))
	h := startEngine(t, store, newFakeOwnership(ownAll(1)), func(o *Options) { o.LoadLimit = 1 })
	h.advance(time.Second)
	require.True(t, lastLoad(t, store)[0].IsZero())
	for range 4 {
		h.advance(time.Second)
	}
	require.Equal(t, []string{"a", "b"}, committedJobs(store.calls()))
}

// TestEngineStartsACrowdEarly: a second holding at least CrowdSize slots
// is committed from CrowdLead before it, in as many batches as it takes,
// with the slots due before it; the next second's slot keeps its commit
// time.
func TestEngineStartsACrowdEarly(t *testing.T) {
	t.Parallel()
	var dues []Due
	for i := range 4 {
		dues = append(dues, hourly(fmt.Sprintf("crowd-%d", i), 0, t0.Add(4*time.Second)))
	}
	dues = append(dues,
		hourly("crowd-late", 0, t0.Add(4500*time.Millisecond)), // the same second
		hourly("before", 0, t0.Add(3*time.Second)),
		hourly("next-second", 0, t0.Add(5*time.Second)),
	)
	store := newFakeStore(dues...)
	h := startEngine(t, store, newFakeOwnership(ownAll(1)), func(o *Options) {
		o.Lead, o.Gather = 500*time.Millisecond, 250*time.Millisecond
		o.CrowdSize, o.CrowdLead = 5, 2*time.Second
		o.BatchSize = 2
	})

	h.advanceTo(2*time.Second - time.Millisecond)
	require.Empty(t, store.calls(), "committed before the crowd's early start")
	h.advance(time.Millisecond)
	committed := committedJobs(store.calls())
	require.ElementsMatch(t, []string{"crowd-0", "crowd-1", "crowd-2", "crowd-3", "crowd-late", "before"}, committed)
	for _, c := range store.calls() {
		require.True(t, t0.Add(2*time.Second).Equal(c.fireTime))
		for _, adv := range c.advances {
			require.Len(t, adv.Slots, 1)
			require.Equal(t, KindScheduled, adv.Slots[0].Kind)
		}
	}

	h.advanceTo(4500*time.Millisecond - time.Millisecond)
	require.Len(t, committedJobs(store.calls()), 6, "the next second committed early")
	h.advance(time.Millisecond)
	require.Equal(t, "next-second", committedJobs(store.calls())[6])
}

// TestEngineNoCrowdBelowCrowdSize: a second with fewer slots than
// CrowdSize keeps its commit time.
func TestEngineNoCrowdBelowCrowdSize(t *testing.T) {
	t.Parallel()
	store := newFakeStore(hourly("a", 0, t0.Add(4*time.Second)), hourly("b", 0, t0.Add(4*time.Second)))
	h := startEngine(t, store, newFakeOwnership(ownAll(1)), func(o *Options) {
		o.Lead = 500 * time.Millisecond
		o.CrowdSize, o.CrowdLead = 3, 2*time.Second
	})
	h.advanceTo(3500*time.Millisecond - time.Millisecond)
	require.Empty(t, store.calls())
	h.advance(time.Millisecond)
	require.ElementsMatch(t, []string{"a", "b"}, committedJobs(store.calls()))
}
