package ring

import (
	"fmt"
	"hash/fnv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPartition(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		jobID      string
		partitions int
	}{
		{name: "empty id", jobID: "", partitions: 256},
		{name: "uuid", jobID: "0190f5c2-8d4e-7a3b-9c1d-2e3f4a5b6c7d", partitions: 256},
		{name: "one partition", jobID: "job-1", partitions: 1},
		{name: "odd count", jobID: "job-2", partitions: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := fnv.New64a()
			_, _ = h.Write([]byte(tt.jobID))
			want := int(h.Sum64() % uint64(tt.partitions))
			got := Partition(tt.jobID, tt.partitions)
			require.Equal(t, want, got, "FNV-1a 64 mod P, fixed forever")
			require.Equal(t, got, Partition(tt.jobID, tt.partitions))
			require.GreaterOrEqual(t, got, 0)
			require.Less(t, got, tt.partitions)
		})
	}
	require.Panics(t, func() { Partition("x", 0) })
}

func TestPartitionSpread(t *testing.T) {
	t.Parallel()
	counts := make([]int, 16)
	for i := range 16000 {
		counts[Partition(fmt.Sprintf("job-%d", i), 16)]++
	}
	for p, n := range counts {
		require.InDelta(t, 1000, n, 150, "partition %d", p)
	}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i+1)
	}
	return out
}

func TestAssign(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		members []string
	}{
		{name: "short ids", members: ids("node-", 3)},
		{name: "hostnames", members: []string{"trigger-7d9f-abcde", "trigger-7d9f-fghij", "trigger-7d9f-klmno"}},
		{name: "uuids", members: []string{"3f1c2a9e-1", "a04b77d0-2", "c9e8f1aa-3"}},
		{name: "one letter", members: []string{"a", "b", "c"}},
	}
	const P = 256
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reversed := []string{tt.members[2], tt.members[1], tt.members[0], tt.members[1]}
			counts := map[string]int{}
			for p := range P {
				owner := Assign(tt.members, p)
				require.Contains(t, tt.members, owner)
				require.Equal(t, owner, Assign(reversed, p), "order and duplicates do not matter")
				counts[owner]++
			}
			for _, m := range tt.members {
				require.GreaterOrEqual(t, counts[m], 60, "member %s: %v", m, counts)
				require.LessOrEqual(t, counts[m], 110, "member %s: %v", m, counts)
			}

			// A 4th member takes partitions only for itself.
			four := append(append([]string{}, tt.members...), "newcomer")
			moved := 0
			for p := range P {
				before, after := Assign(tt.members, p), Assign(four, p)
				if before != after {
					require.Equal(t, "newcomer", after, "partition %d moved between old members", p)
					moved++
				}
			}
			require.Greater(t, moved, 30)
			require.Less(t, moved, 100)

			// Removing a member moves only its partitions.
			two := tt.members[1:]
			for p := range P {
				if before := Assign(tt.members, p); before != tt.members[0] {
					require.Equal(t, before, Assign(two, p), "partition %d moved needlessly", p)
				}
			}
		})
	}
	require.Empty(t, Assign(nil, 3))
}
