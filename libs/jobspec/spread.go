package jobspec

import "time"

// SpreadOffset is the deterministic delay, in [0, window), at which every
// slot of the job jobID fires after its nominal time when the job has a
// spread window: the FNV-1a 64-bit hash of the id, modulo the window counted
// in whole milliseconds. The same job always gets the same offset (on every
// node and across restarts, so a failover does not move its firings), and
// ids hashing uniformly spread a top-of-the-minute burst evenly over the
// window. A window under 1 ms (including zero and negative windows) gives 0.
// The offset delays the firing only: the slot's nominal time, its ledger key
// and its execution id are unchanged.
func SpreadOffset(jobID string, window time.Duration) time.Duration {
	ms := uint64(window / time.Millisecond)
	if ms == 0 || window < 0 {
		return 0
	}
	// FNV-1a inlined: hash/fnv would allocate a hasher and a []byte copy of
	// the id for every call, and this runs for every loaded job.
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(jobID); i++ {
		h ^= uint64(jobID[i])
		h *= prime64
	}
	return time.Duration(h%ms) * time.Millisecond
}
