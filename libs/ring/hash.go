package ring

import "strconv"

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// fnv64a is FNV-1a 64 of s, without hash/fnv's allocation.
func fnv64a(s string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}

// mix64 is the splitmix64 finalizer: a bijection that spreads every input
// bit over every output bit. FNV alone is too weak for rendezvous weights of
// short, similar ids (node-1, node-2...).
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Partition maps a job id to its partition: FNV-1a 64 of the id's bytes,
// modulo partitions. The mapping is part of the cluster's persistent state
// (jobs are stored and fired by partition), so it is fixed forever for a
// cluster: neither the hash nor the cluster's partition count may change
// without migrating every job. partitions must be positive; Partition panics
// otherwise, like an integer division by zero, since that is a programming
// error (Options validates the count the ring uses).
func Partition(jobID string, partitions int) int {
	if partitions <= 0 {
		panic("ring: Partition with partitions = " + strconv.Itoa(partitions))
	}
	return int(fnv64a(jobID) % uint64(partitions))
}

// weight is the rendezvous weight of member for partition p.
func weight(member string, p int) uint64 {
	return mix64(fnv64a(member) ^ mix64(uint64(p)+0x9e3779b97f4a7c15))
}

// Assign returns the owner of partition p among members by rendezvous
// (highest random weight) hashing: the member with the highest
// weight(member, p), ties broken by the smaller id. It depends only on the
// set of ids, not their order or duplicates, so every node computes the same
// answer from the same membership; adding a member moves to it exactly the
// partitions it now wins, and removing one moves only its own partitions,
// each to its runner-up. Nodes running different versions must agree on this
// function, so it must not change. It returns "" when members is empty.
func Assign(members []string, p int) string {
	var (
		best  string
		bestW uint64
		found bool
	)
	for _, m := range members {
		w := weight(m, p)
		if !found || w > bestW || (w == bestW && m < best) {
			best, bestW, found = m, w, true
		}
	}
	return best
}
