package firing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/jobspec"
)

// hourly is a job whose first slot is at `first` and the next an hour later:
// beyond any lookahead, so each test sees exactly one firing of it.
func hourly(id string, partition int, first time.Time, opts ...jobOpt) Due {
	return due(newJob(id, everySched(time.Hour, first), opts...), partition, first)
}

func committedJobs(calls []commitCall) []string {
	var ids []string
	for _, c := range calls {
		if c.err != nil {
			continue
		}
		ids = append(ids, c.result.Advanced...)
	}
	return ids
}

func TestEngineFiresAtTheSlotNotBefore(t *testing.T) {
	t.Parallel()
	store := newFakeStore(hourly("a", 3, t0.Add(2*time.Second)))
	h := startEngine(t, store, newFakeOwnership(ownAll(8)), nil)
	require.Equal(t, [][]int{{0, 1, 2, 3, 4, 5, 6, 7}}, store.loads())
	require.Equal(t, 1.0, h.metric("trigger_heap_size"))

	h.advance(1999 * time.Millisecond)
	require.Empty(t, store.calls(), "committed before its time")

	h.advance(time.Millisecond)
	calls := store.calls()
	require.Len(t, calls, 1)
	c := calls[0]
	require.NoError(t, c.err)
	require.Equal(t, []Fence{{Partition: 3, Epoch: 1}}, c.fences)
	require.True(t, t0.Add(2*time.Second).Equal(c.fireTime))
	require.Len(t, c.advances, 1)
	require.Equal(t, []Slot{{Nominal: t0.Add(2 * time.Second), Kind: KindScheduled}}, c.advances[0].Slots)
	require.True(t, t0.Add(time.Hour+2*time.Second).Equal(c.advances[0].To))
	require.Equal(t, []string{"a"}, c.result.Advanced)

	require.Equal(t, 1.0, h.metric("trigger_slots_total", "scheduled"))
	require.Equal(t, 1.0, h.metric("trigger_fire_lateness_seconds"))
	require.Equal(t, 1.0, h.metric("trigger_commit_duration_seconds"))
	require.Equal(t, 0.0, h.metric("trigger_heap_size"), "next slot beyond the lookahead")

	h.advance(10 * time.Second)
	require.Len(t, store.calls(), 1, "fired once")
}

// TestEngineWithLeadCommitsAhead: with a lead, a slot is committed that
// long before its firing time (nominal plus the job's spread offset), at
// the real time, and counts as scheduled, on time.
func TestEngineWithLeadCommitsAhead(t *testing.T) {
	t.Parallel()
	const lead = 700 * time.Millisecond
	d := hourly("a", 3, t0.Add(3*time.Second), withSpread(time.Second))
	firingTime := d.FiringTime(d.NextFire)
	require.True(t, firingTime.After(t0.Add(3*time.Second)), "the job has a spread offset")
	store := newFakeStore(d)
	h := startEngine(t, store, newFakeOwnership(ownAll(8)), func(o *Options) { o.Lead = lead })

	h.advanceTo(firingTime.Sub(t0) - lead - time.Millisecond)
	require.Empty(t, store.calls(), "committed before its commit time")

	h.advance(time.Millisecond)
	calls := store.calls()
	require.Len(t, calls, 1)
	require.NoError(t, calls[0].err)
	require.True(t, firingTime.Add(-lead).Equal(calls[0].fireTime), "committed at %s", calls[0].fireTime)
	require.Equal(t, []Slot{{Nominal: t0.Add(3 * time.Second), Kind: KindScheduled}}, calls[0].advances[0].Slots)
	require.Equal(t, 1.0, h.metric("trigger_slots_total", "scheduled"))

	h.advance(10 * time.Second)
	require.Len(t, store.calls(), 1, "fired once")
}

// TestEngineGathersSlotsDueSoon: with the slots whose commit time has
// come, a commit takes those due within Gather after them, each as a
// scheduled slot of its own nominal time, and leaves the later ones for a
// later commit.
func TestEngineGathersSlotsDueSoon(t *testing.T) {
	t.Parallel()
	const lead, gather = 500 * time.Millisecond, 250 * time.Millisecond
	firing := []time.Duration{time.Second, 1100 * time.Millisecond, 1250 * time.Millisecond, 1300 * time.Millisecond}
	var dues []Due
	for i, at := range firing {
		dues = append(dues, hourly(fmt.Sprintf("job-%d", i), 0, t0.Add(at)))
	}
	store := newFakeStore(dues...)
	h := startEngine(t, store, newFakeOwnership(ownAll(1)), func(o *Options) { o.Lead, o.Gather = lead, gather })

	h.advanceTo(500*time.Millisecond - time.Millisecond)
	require.Empty(t, store.calls(), "committed before the first commit time")
	h.advance(time.Millisecond)
	calls := store.calls()
	require.Len(t, calls, 1)
	require.True(t, t0.Add(500*time.Millisecond).Equal(calls[0].fireTime))
	require.Equal(t, []string{"job-0", "job-1", "job-2"}, calls[0].result.Advanced)
	for i, adv := range calls[0].advances {
		require.Equal(t, []Slot{{Nominal: t0.Add(firing[i]), Kind: KindScheduled}}, adv.Slots)
	}

	h.advanceTo(800*time.Millisecond - time.Millisecond)
	require.Len(t, store.calls(), 1, "job-3 committed more than Lead + Gather before its time")
	h.advance(time.Millisecond)
	calls = store.calls()
	require.Len(t, calls, 2)
	require.Equal(t, []string{"job-3"}, calls[1].result.Advanced)
	h.advance(10 * time.Second)
	require.Len(t, store.calls(), 2, "fired once")
}

func TestEngineBatchesJobsDueTogether(t *testing.T) {
	t.Parallel()
	const jobs = 5000
	store := newFakeStore()
	for i := range jobs {
		store.put(hourly(fmt.Sprintf("job-%05d", i), i%256, t0.Add(time.Second)))
	}
	h := startEngine(t, store, newFakeOwnership(ownAll(256)), nil)
	require.Equal(t, float64(jobs), h.metric("trigger_heap_size"))

	h.advance(time.Second)
	calls := store.calls()
	require.LessOrEqual(t, len(calls), 5)
	seen := map[string]bool{}
	for _, c := range calls {
		require.NoError(t, c.err)
		require.LessOrEqual(t, len(c.advances), DefaultBatchSize)
		fenced := map[int]bool{}
		for _, f := range c.fences {
			fenced[f.Partition] = true
		}
		for _, a := range c.advances {
			require.True(t, fenced[a.Due.Partition], "fence of partition %d missing", a.Due.Partition)
			require.False(t, seen[a.Due.JobID], "job %s committed twice", a.Due.JobID)
			seen[a.Due.JobID] = true
		}
	}
	require.Len(t, seen, jobs)
	require.Equal(t, float64(jobs), h.metric("trigger_slots_total", "scheduled"))
}

func TestEngineCommitsConcurrently(t *testing.T) {
	t.Parallel()
	const jobs = 4000
	store := newFakeStore()
	for i := range jobs {
		store.put(hourly(fmt.Sprintf("job-%05d", i), i%256, t0.Add(time.Second)))
	}
	h := startEngine(t, store, newFakeOwnership(ownAll(256)), func(o *Options) { o.Commits = 3 })
	entered, release := make(chan struct{}), make(chan struct{})
	store.mu.Lock()
	store.commitEntered, store.commitRelease = entered, release
	store.mu.Unlock()

	h.clock.Advance(time.Second)
	for i := range 3 {
		select {
		case <-entered:
		case <-time.After(failAfter):
			t.Fatalf("only %d commits started while the first is still in flight", i)
		}
	}
	require.Empty(t, store.calls(), "no commit has finished yet")
	store.mu.Lock()
	store.commitEntered, store.commitRelease = nil, nil
	store.mu.Unlock()
	close(release)
	h.sync()

	calls := store.calls()
	require.Len(t, calls, 4, "4,000 jobs in batches of 1,000")
	seen := map[string]bool{}
	for _, c := range calls {
		for _, a := range c.advances {
			require.False(t, seen[a.Due.JobID], "job %s committed twice", a.Due.JobID)
			seen[a.Due.JobID] = true
		}
	}
	require.Len(t, seen, jobs)
	require.Equal(t, float64(jobs), h.metric("trigger_slots_total", "scheduled"))
}

func TestEngineGroupsSlotsDueWhileACommitIsInFlight(t *testing.T) {
	t.Parallel()
	store := newFakeStore(
		hourly("a", 0, t0.Add(time.Second)),
		hourly("b", 1, t0.Add(1200*time.Millisecond)),
		hourly("c", 2, t0.Add(1210*time.Millisecond)),
	)
	h := startEngine(t, store, newFakeOwnership(ownAll(4)), nil)
	entered, release := make(chan struct{}, 10), make(chan struct{})
	store.mu.Lock()
	store.commitEntered, store.commitRelease = entered, release
	store.mu.Unlock()

	h.clock.Advance(time.Second)
	<-entered // a's commit is in flight
	h.advanceInFlight(200 * time.Millisecond)
	require.Empty(t, entered, "b waits for a's commit")
	h.advanceInFlight(10 * time.Millisecond)
	require.Empty(t, entered, "so does c")
	h.advanceInFlight(DefaultGroupWait - 10*time.Millisecond - time.Nanosecond)
	require.Empty(t, entered, "up to the group wait after b's time")
	h.advanceInFlight(time.Nanosecond)
	<-entered // b and c go, a still in flight
	store.mu.Lock()
	store.commitEntered, store.commitRelease = nil, nil
	store.mu.Unlock()
	close(release)
	h.sync()

	var batches [][]string
	for _, c := range store.calls() {
		var ids []string
		for _, a := range c.advances {
			ids = append(ids, a.Due.JobID)
		}
		slices.Sort(ids)
		batches = append(batches, ids)
	}
	slices.SortFunc(batches, func(x, y []string) int { return len(x) - len(y) })
	require.Equal(t, [][]string{{"a"}, {"b", "c"}}, batches, "b and c went together")
}

func TestEngineOwnershipLoss(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		remaining map[int]int64
		want      []string
	}{
		{name: "all partitions lost", remaining: map[int]int64{}, want: nil},
		{name: "one partition lost", remaining: map[int]int64{1: 1}, want: []string{"b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := newFakeStore(hourly("a", 0, t0.Add(2*time.Second)), hourly("b", 1, t0.Add(2*time.Second)))
			own := newFakeOwnership(ownAll(2))
			h := startEngine(t, store, own, nil)
			require.Equal(t, 2.0, h.metric("trigger_heap_size"))

			own.set(tt.remaining)
			h.sync()
			require.Equal(t, float64(len(tt.want)), h.metric("trigger_heap_size"), "entries dropped at once")

			h.advance(3 * time.Second)
			require.Equal(t, tt.want, committedJobs(store.calls()))
			for _, parts := range store.loads()[1:] {
				for _, p := range parts {
					require.Contains(t, tt.remaining, p, "loaded a partition no longer owned")
				}
			}
		})
	}
}

// TestEngineOwnershipReadBeforeCommit: a partition lost without a Changes
// signal yet (the lease deadline passed) is not committed.
func TestEngineOwnershipReadBeforeCommit(t *testing.T) {
	t.Parallel()
	store := newFakeStore(hourly("a", 0, t0.Add(time.Second)), hourly("b", 1, t0.Add(time.Second)))
	own := newFakeOwnership(ownAll(2))
	h := startEngine(t, store, own, nil)

	own.mu.Lock()
	own.owned = map[int]int64{1: 1} // no signal
	own.mu.Unlock()
	h.advance(time.Second)
	calls := store.calls()
	require.Len(t, calls, 1)
	require.Equal(t, []Fence{{Partition: 1, Epoch: 1}}, calls[0].fences)
	require.Equal(t, []string{"b"}, committedJobs(calls))
}

func TestEngineFenced(t *testing.T) {
	t.Parallel()
	store := newFakeStore(
		hourly("a", 1, t0.Add(2*time.Second)),
		hourly("b", 1, t0.Add(3*time.Second)),
		hourly("c", 2, t0.Add(3*time.Second)),
	)
	store.epochs[1] = 5 // another node owns partition 1 at a newer epoch
	own := newFakeOwnership(ownAll(3))
	h := startEngine(t, store, own, nil)

	h.advanceTo(2 * time.Second)
	calls := store.calls()
	require.Len(t, calls, 1)
	require.Equal(t, []int{1}, calls[0].result.Fenced)
	require.Equal(t, 1.0, h.metric("trigger_fenced_total"))
	require.Equal(t, 1.0, h.metric("trigger_heap_size"), "b dropped with its partition")

	h.advanceTo(3 * time.Second)
	calls = store.calls()
	require.Len(t, calls, 2)
	require.Equal(t, []Fence{{Partition: 2, Epoch: 1}}, calls[1].fences)
	require.Equal(t, []string{"c"}, calls[1].result.Advanced)
	loads := store.loads()
	require.Equal(t, []int{0, 2}, loads[len(loads)-1], "fenced partition not loaded again at the same epoch")

	// The ring gives partition 1 back at a newer epoch: its jobs fire.
	own.set(map[int]int64{0: 1, 1: 6, 2: 1})
	h.sync()
	calls = store.calls()
	require.Len(t, calls, 3)
	require.Equal(t, []Fence{{Partition: 1, Epoch: 6}}, calls[2].fences)
	require.ElementsMatch(t, []string{"a", "b"}, calls[2].result.Advanced)
}

func TestEngineStale(t *testing.T) {
	t.Parallel()
	first := t0.Add(2500 * time.Millisecond)
	store := newFakeStore(hourly("a", 0, first))
	h := startEngine(t, store, newFakeOwnership(ownAll(1)), nil)

	h.advanceTo(2200 * time.Millisecond) // the load at 1s (handled now) read version 1
	v2 := hourly("a", 0, first)
	v2.Version, v2.Job.Version = 2, 2
	store.put(v2) // the job changes after the last load

	h.advanceTo(2500 * time.Millisecond)
	calls := store.calls()
	require.Len(t, calls, 1)
	require.Equal(t, []string{"a"}, calls[0].result.Stale)
	require.Equal(t, 1.0, h.metric("trigger_stale_total"))
	require.Equal(t, 0.0, h.metric("trigger_heap_size"), "stale entry dropped")

	h.advanceTo(3200 * time.Millisecond) // the next load reads version 2 and fires it
	calls = store.calls()
	require.Len(t, calls, 2)
	require.Equal(t, int64(2), calls[1].advances[0].Due.Version)
	require.Equal(t, []string{"a"}, calls[1].result.Advanced)
	require.Equal(t, []Slot{{Nominal: first, Kind: KindScheduled}}, store.slotsOf("a"))
}

func TestEngineCommitErrorRetried(t *testing.T) {
	t.Parallel()
	store := newFakeStore(hourly("a", 0, t0.Add(2*time.Second)))
	store.commitErr = []error{errors.New("connection reset")}
	h := startEngine(t, store, newFakeOwnership(ownAll(1)), nil)

	h.advance(2 * time.Second)
	require.Len(t, store.calls(), 1)
	require.Equal(t, 1.0, h.metric("trigger_commit_errors_total"))
	require.Equal(t, 1.0, h.metric("trigger_heap_size"), "kept for the retry")

	// The first backoff is 50-100ms (100ms with jitter in its upper half).
	h.advance(49 * time.Millisecond)
	require.Len(t, store.calls(), 1, "retried before the backoff")
	h.advance(51 * time.Millisecond)
	calls := store.calls()
	require.Len(t, calls, 2)
	require.Equal(t, []string{"a"}, calls[1].result.Advanced)

	h.advance(10 * time.Second)
	require.Len(t, store.calls(), 2, "committed once")
	require.Equal(t, []Slot{{Nominal: t0.Add(2 * time.Second), Kind: KindScheduled}}, store.slotsOf("a"))
}

func TestEngineRepushesTheNextSlot(t *testing.T) {
	t.Parallel()
	store := newFakeStore(due(newJob("a", everySched(2*time.Second, t0)), 0, t0.Add(2*time.Second)))
	h := startEngine(t, store, newFakeOwnership(ownAll(1)), func(o *Options) {
		o.Lookahead, o.LoadInterval = time.Minute, time.Minute
	})
	for i := 1; i <= 5; i++ {
		h.advance(2 * time.Second)
		calls := store.calls()
		require.Len(t, calls, i)
		nominal := t0.Add(time.Duration(2*i) * time.Second)
		a := calls[i-1].advances[0]
		require.True(t, nominal.Equal(a.Due.NextFire), "CAS from the re-pushed NextFire")
		require.Equal(t, []Slot{{Nominal: nominal, Kind: KindScheduled}}, a.Slots)
		require.Equal(t, []string{"a"}, calls[i-1].result.Advanced)
	}
	require.Len(t, store.loads(), 1, "no reload needed")
}

// TestEngineStopsAtMaxRuns: a job with max_runs 3, fired from memory
// between loads, fires exactly three slots and then leaves the heap; the
// store never returns it again.
func TestEngineStopsAtMaxRuns(t *testing.T) {
	t.Parallel()
	store := newFakeStore(due(newJob("a", everySched(2*time.Second, t0), withMaxRuns(3)), 0, t0.Add(2*time.Second)))
	h := startEngine(t, store, newFakeOwnership(ownAll(1)), func(o *Options) {
		o.Lookahead, o.LoadInterval = time.Minute, time.Minute
	})
	for range 10 {
		h.advance(2 * time.Second)
	}
	calls := store.calls()
	require.Len(t, calls, 3)
	for i, c := range calls {
		require.EqualValues(t, i, c.advances[0].Due.RunsFired, "CAS from the count the last commit left")
		require.Equal(t, []string{"a"}, c.result.Advanced)
	}
	require.True(t, calls[2].advances[0].To.IsZero(), "the third run completes the job")
	require.Equal(t, expand(slotRun{KindScheduled, t0.Add(2 * time.Second), 2 * time.Second, 3}), store.slotsOf("a"))
	require.Zero(t, h.metric("trigger_heap_size"), "nothing left in memory")

	h.advance(2 * time.Minute) // two more loads
	require.Len(t, store.calls(), 3, "a completed job fires nothing more")
}

func TestEngineCatchesUpInChunks(t *testing.T) {
	t.Parallel()
	store := newFakeStore(due(newJob("a", everySched(time.Second, t0)), 0, t0.Add(-2*time.Hour)))
	h := startEngine(t, store, newFakeOwnership(ownAll(1)), nil)

	calls := store.calls()
	require.Len(t, calls, 8) // 7,201 slots by 1,000
	for _, c := range calls {
		require.LessOrEqual(t, len(c.advances[0].Slots), DefaultMaxSlots)
	}
	slots := store.slotsOf("a")
	require.Len(t, slots, 7201)
	require.True(t, t0.Add(-2*time.Hour).Equal(slots[0].Nominal))
	require.True(t, t0.Equal(slots[len(slots)-1].Nominal))
	require.Equal(t, 3600.0, h.metric("trigger_slots_total", "missed"))
	require.Equal(t, 3596.0, h.metric("trigger_slots_total", "catch_up"))
	require.Equal(t, 5.0, h.metric("trigger_slots_total", "scheduled"))
	require.Len(t, store.loads(), 1)

	h.advance(time.Second) // and goes on from memory
	require.Len(t, store.calls(), 9)
	require.Len(t, store.slotsOf("a"), 7202)
}

func TestEngineBatchSlotsBound(t *testing.T) {
	t.Parallel()
	store := newFakeStore()
	for i := range 30 { // 30 jobs 100 slots behind each
		store.put(due(newJob(fmt.Sprint(i), everySched(time.Second, t0)), 0, t0.Add(-99*time.Second)))
	}
	startEngine(t, store, newFakeOwnership(ownAll(1)), func(o *Options) { o.BatchSlots = 1000 })
	calls := store.calls()
	require.Len(t, calls, 3)
	for _, c := range calls {
		require.Len(t, c.advances, 10)
	}
}

func TestEngineLoadErrorRetried(t *testing.T) {
	t.Parallel()
	store := newFakeStore(hourly("a", 0, t0.Add(1500*time.Millisecond)))
	store.dueErrs = []error{errors.New("db down")}
	h := startEngine(t, store, newFakeOwnership(ownAll(1)), nil)
	require.Equal(t, 1.0, h.metric("trigger_load_errors_total"))
	require.Equal(t, 0.0, h.metric("trigger_heap_size"))

	h.advance(time.Second)
	require.Equal(t, 1.0, h.metric("trigger_heap_size"))
	h.advance(500 * time.Millisecond)
	require.Equal(t, []string{"a"}, committedJobs(store.calls()))
}

func TestEngineLeavesBadJobs(t *testing.T) {
	t.Parallel()
	bad := due(newJob("bad", cronSched("61 * * * *", "UTC")), 0, t0.Add(time.Second))
	store := newFakeStore(bad, hourly("good", 0, t0.Add(time.Second)))
	h := startEngine(t, store, newFakeOwnership(ownAll(1)), nil)

	h.advance(time.Second)
	require.Equal(t, []string{"good"}, committedJobs(store.calls()))
	require.Equal(t, 1.0, h.metric("trigger_plan_errors_total"))

	h.advance(time.Second) // reloaded unchanged: neither fired nor counted again
	h.advance(time.Second)
	require.Len(t, store.calls(), 1)
	require.Equal(t, 1.0, h.metric("trigger_plan_errors_total"))

	fixed := due(newJob("bad", cronSched("* * * * *", "UTC")), 0, t0.Add(time.Second))
	fixed.Version, fixed.Job.Version = 2, 2
	store.put(fixed)
	h.advance(time.Second)
	require.Len(t, store.calls(), 1, "read the fixed job though no change was reported")
	h.changes.change(0) // as the projection reports the new version
	h.advance(time.Second)
	require.Equal(t, []string{"good", "bad"}, committedJobs(store.calls()))
}

// TestEngineIgnoresCopiesReadBeforeItsCommit: a load that read a job's row
// before this node's commit advanced it must not bring the old slot back.
func TestEngineIgnoresCopiesReadBeforeItsCommit(t *testing.T) {
	t.Parallel()
	store := newFakeStore(due(newJob("a", everySched(10*time.Second, t0.Add(2*time.Second))), 0, t0.Add(2*time.Second)))
	h := startEngine(t, store, newFakeOwnership(ownAll(1)), nil)

	entered, release := make(chan struct{}), make(chan struct{})
	cEntered, cRelease := make(chan struct{}), make(chan struct{})
	store.mu.Lock()
	store.dueEntered, store.dueRelease = entered, release
	store.commitEntered, store.commitRelease = cEntered, cRelease
	store.mu.Unlock()

	h.clock.Set(t0.Add(1500 * time.Millisecond)) // the 1s load starts and reads the row
	<-entered
	h.clock.Set(t0.Add(2 * time.Second)) // the slot fires while the load is in flight
	<-cEntered
	store.mu.Lock()
	store.dueEntered, store.dueRelease = nil, nil
	store.commitEntered, store.commitRelease = nil, nil
	store.mu.Unlock()
	close(cRelease)
	close(release) // the load returns the row as it was before the commit
	h.sync()
	require.Len(t, store.calls(), 1)
	require.Equal(t, 0.0, h.metric("trigger_heap_size"))

	h.advanceTo(5 * time.Second)
	require.Len(t, store.calls(), 1, "fired the old slot again")
	require.Equal(t, 0.0, h.metric("trigger_stale_total"))
}

func TestEngineSpread(t *testing.T) {
	t.Parallel()
	const window = 3 * time.Second
	offset := jobspec.SpreadOffset("spread", window)
	require.Positive(t, offset)
	first := t0.Add(time.Second)
	store := newFakeStore(hourly("spread", 0, first, withSpread(window)))
	h := startEngine(t, store, newFakeOwnership(ownAll(1)), nil)

	h.advanceTo(time.Second + offset - time.Millisecond)
	require.Empty(t, store.calls())
	h.advanceTo(time.Second + offset)
	calls := store.calls()
	require.Len(t, calls, 1)
	require.Equal(t, []Slot{{Nominal: first, Kind: KindScheduled}}, calls[0].advances[0].Slots)
}

func TestEngineShutdown(t *testing.T) {
	t.Parallel()
	t.Run("idle", func(t *testing.T) {
		t.Parallel()
		h := startEngine(t, newFakeStore(hourly("a", 0, t0.Add(time.Second))), newFakeOwnership(ownAll(1)), nil)
		h.stop()
		require.NoError(t, h.wait())
	})
	t.Run("finishes the commit in flight", func(t *testing.T) {
		t.Parallel()
		store := newFakeStore(hourly("a", 0, t0.Add(time.Second)))
		h := startEngine(t, store, newFakeOwnership(ownAll(1)), nil)
		entered, release := make(chan struct{}), make(chan struct{})
		store.mu.Lock()
		store.commitEntered, store.commitRelease = entered, release
		store.mu.Unlock()

		h.clock.Advance(time.Second)
		<-entered
		h.stop()
		close(release)
		require.NoError(t, h.wait())
		calls := store.calls()
		require.Len(t, calls, 1)
		require.NoError(t, calls[0].ctxErr, "commit cut short by the shutdown")
		require.Equal(t, []string{"a"}, calls[0].result.Advanced)
	})
	t.Run("abandons a load in flight", func(t *testing.T) {
		t.Parallel()
		store := newFakeStore()
		h := startEngine(t, store, newFakeOwnership(ownAll(1)), nil)
		entered := make(chan struct{})
		store.mu.Lock()
		store.dueEntered, store.dueRelease = entered, make(chan struct{})
		store.mu.Unlock()
		h.clock.Advance(time.Second)
		<-entered
		h.stop()
		require.NoError(t, h.wait())
	})
}

func TestEngineRunTwice(t *testing.T) {
	t.Parallel()
	h := startEngine(t, newFakeStore(), newFakeOwnership(ownAll(1)), nil)
	require.ErrorContains(t, h.e.Run(context.Background()), "already running")
}

func TestNewEngine(t *testing.T) {
	t.Parallel()
	store, own := newFakeStore(), newFakeOwnership(nil)
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{name: "defaults", opts: Options{Store: store, Ownership: own}},
		{name: "no store", opts: Options{Ownership: own}, want: "Store is required"},
		{name: "no ownership", opts: Options{Store: store}, want: "Ownership is required"},
		{name: "negative batch", opts: Options{Store: store, Ownership: own, BatchSize: -1}, want: "negative"},
		{name: "negative lookahead", opts: Options{Store: store, Ownership: own, Lookahead: -time.Second}, want: "negative"},
		{name: "negative lead", opts: Options{Store: store, Ownership: own, Lead: -time.Second}, want: "negative"},
		{
			name: "lookahead shorter than the load interval and the lead",
			opts: Options{Store: store, Ownership: own, Lookahead: 2 * time.Second, LoadInterval: time.Second, Lead: 1500 * time.Millisecond},
			want: "Lookahead must be at least LoadInterval + Lead",
		},
		{name: "negative gather", opts: Options{Store: store, Ownership: own, Gather: -time.Second}, want: "negative"},
		{
			name: "lookahead shorter than the load interval, the lead and the gather",
			opts: Options{Store: store, Ownership: own, Lookahead: 2 * time.Second, LoadInterval: time.Second, Lead: 500 * time.Millisecond, Gather: 600 * time.Millisecond},
			want: "Lookahead must be at least LoadInterval + Lead (or CrowdLead) + Gather",
		},
		{
			name: "lookahead shorter than the load interval",
			opts: Options{Store: store, Ownership: own, Lookahead: time.Second, LoadInterval: 2 * time.Second},
			want: "Lookahead must be at least LoadInterval",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, err := NewEngine(tt.opts)
			if tt.want != "" {
				require.ErrorContains(t, err, tt.want)
				require.Nil(t, e)
				return
			}
			require.NoError(t, err)
			require.Equal(t, DefaultLookahead, e.lookahead)
			require.Equal(t, DefaultBatchSize, e.batch)
			require.Equal(t, DefaultLoadLimit, e.limit)
		})
	}

	t.Run("metrics registered once", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		_, err := NewEngine(Options{Store: store, Ownership: own, Metrics: reg})
		require.NoError(t, err)
		_, err = NewEngine(Options{Store: store, Ownership: own, Metrics: reg})
		require.ErrorContains(t, err, "register metrics")
	})
}
