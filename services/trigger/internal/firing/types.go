package firing

import (
	"context"
	"time"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

// SlotKind is why a slot is in the ledger.
type SlotKind int

// Slot kinds, as stored in the ledger (values are persisted: never renumber).
const (
	KindScheduled SlotKind = 1 // fired on time
	KindManual    SlotKind = 2 // JobService.RunJob
	KindBackfill  SlotKind = 3 // TriggerService.BackfillJob
	KindCatchUp   SlotKind = 4 // fired late after downtime, within the catch-up window
	KindMissed    SlotKind = 5 // not fired: older than the catch-up window
)

// Due is a job whose next slot is at or before the load horizon, as the
// Store returns it for owned partitions.
type Due struct {
	JobID     string
	Partition int
	// Version is the job's version the row holds; Commit compare-and-sets
	// on (NextFire, Version), so a job changed since loading is not fired
	// from stale data.
	Version int64
	// NextFire is the nominal time of the job's next slot (never zero here).
	NextFire time.Time
	// RunsFired is the row's count of runs against the job's max_runs
	// (Job.max_runs; 0 without a limit). Commit compare-and-sets on it too
	// and adds the advance's Runs.
	RunsFired int64
	// Job is the full definition (schedule, target with signing secret,
	// retry policy, catch-up and spread windows).
	Job *registryv1.Job
}

// Slot is one (job, nominal time) entry for the ledger.
type Slot struct {
	Nominal time.Time
	Kind    SlotKind
	// Reason, for KindMissed: why it was not fired.
	Reason string
}

// Advance is what committing one due job does: record Slots (fired and
// missed, oldest first) and move the job's next fire time from From to To
// (zero To: the schedule has no slot left, or the job reached its
// max_runs; either way the job is done).
type Advance struct {
	Due   Due
	Slots []Slot
	To    time.Time
}

// Runs is how many of the advance's slots count against the job's
// max_runs: its scheduled and catch-up slots when the job has a limit
// (manual runs and backfills never come through an Advance, and missed
// slots do not count); 0 for a job without one.
func (a Advance) Runs() int64 {
	if a.Due.Job.GetMaxRuns() <= 0 {
		return 0
	}
	var n int64
	for _, s := range a.Slots {
		if s.Kind == KindScheduled || s.Kind == KindCatchUp {
			n++
		}
	}
	return n
}

// Completes says whether committing the advance completes the job: it has
// a limit, and the runs it fired before plus the advance's reach it.
func (a Advance) Completes() bool {
	limit := a.Due.Job.GetMaxRuns()
	return limit > 0 && a.Due.RunsFired+a.Runs() >= limit
}

// Fence is the partition epoch a commit claims: the commit fails for every
// job of a partition whose stored epoch is newer.
type Fence struct {
	Partition int
	Epoch     int64
}

// CommitResult says what a batch commit did.
type CommitResult struct {
	// Fenced partitions: a newer epoch owns them; nothing of theirs was
	// committed and this node must stop firing them.
	Fenced []int
	// Advanced job ids whose compare-and-set succeeded (their slots are in
	// the ledger, their messages in the outbox).
	Advanced []string
	// Stale job ids whose row changed since loading (CAS failed): reload.
	Stale []string
	// Duplicates: slots already in the ledger (another commit had them).
	Duplicates int
}

// Store is the persistence the engine needs. Implemented by the trigger's
// Postgres store.
type Store interface {
	// DueJobs returns the jobs of the loads' partitions whose next slot is
	// at or before `before` (and after the load's After, when set), oldest
	// first, at most limit.
	DueJobs(ctx context.Context, loads []PartitionLoad, before time.Time, limit int) ([]Due, error)
	// Commit applies advances in one transaction: fencing check of every
	// fence (stored epoch <= ours, then stored := ours), CAS of each job's
	// next fire time, ledger rows ON CONFLICT DO NOTHING, and one outbox
	// message per new ledger row (a DispatchRequest for fired slots, an
	// execution.missed event for missed ones). fireTime is the commit's
	// clock reading.
	Commit(ctx context.Context, fences []Fence, advances []Advance, fireTime time.Time) (CommitResult, error)
}

// Ownership is the ring as the engine sees it.
type Ownership interface {
	// Owned returns the partitions this node may fire now, with their
	// epochs; empty when the node's lease may have expired.
	Owned() map[int]int64
	// Changes is signalled (coalescing) when the owned set changes.
	Changes() <-chan struct{}
}

// PartitionLoad is one partition of a DueJobs call.
type PartitionLoad struct {
	Partition int
	// After, when not zero, leaves out the jobs whose next slot is at or
	// before it: the engine holds them already.
	After time.Time
}

// JobChanges reports the job rows changed by anyone but the engine's own
// commits: the projection's creates, updates, pauses and deletes, on any
// node. The engine reads such partitions whole again; the others it reads
// only for the slots that came within its horizon since the last load.
type JobChanges interface {
	// Changed returns the partitions whose jobs changed since the last
	// call, or all when changes may have gone unreported since then (the
	// watch is down, or has just started); the first call returns all.
	Changed() (partitions []int, all bool)
}
