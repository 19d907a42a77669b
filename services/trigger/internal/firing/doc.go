// Package firing is the trigger's engine: for the partitions this node owns,
// it keeps the slots due in the next few seconds in a min-heap and, at each
// slot's time, commits it (with every other slot due then) in one batch
// through the Store, which checks the partition epoch (fencing), advances
// the job's next fire time by compare-and-set and writes the ledger rows and
// their dispatch messages.
//
// It decides what a due job means: which slots fire now (oldest first), which
// are older than the job's catch-up window and are recorded missed, where the
// job's next slot is, and when the deterministic spread offset delays a
// firing. It imports no database, broker or etcd package; the clock is
// injected, so its tests drive time.
package firing
