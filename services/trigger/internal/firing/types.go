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
// (zero To: the schedule has no slot left, the job is done).
type Advance struct {
	Due   Due
	Slots []Slot
	To    time.Time
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
	// DueJobs returns the jobs of partitions whose next slot is at or before
	// `before`, oldest first, at most limit.
	DueJobs(ctx context.Context, partitions []int, before time.Time, limit int) ([]Due, error)
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
