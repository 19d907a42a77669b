package jobspec

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSpreadOffset(t *testing.T) {
	t.Parallel()
	fnv := func(s string) uint64 { // the reference: FNV-1a 64 from its definition
		h := uint64(14695981039346656037)
		for _, c := range []byte(s) {
			h = (h ^ uint64(c)) * 1099511628211
		}
		return h
	}
	tests := []struct {
		name   string
		id     string
		window time.Duration
		want   time.Duration
	}{
		{name: "no window", id: "job", window: 0, want: 0},
		{name: "negative window", id: "job", window: -time.Second, want: 0},
		{name: "under a millisecond", id: "job", window: 999 * time.Microsecond, want: 0},
		{name: "one millisecond", id: "job", window: time.Millisecond, want: 0},
		{name: "empty id", id: "", window: time.Hour, want: time.Duration(fnv("")%3_600_000) * time.Millisecond},
		{name: "uuid", id: "0190a5b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b", window: time.Minute,
			want: time.Duration(fnv("0190a5b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b")%60_000) * time.Millisecond},
		{name: "sub-millisecond part ignored", id: "x", window: 10*time.Second + 999*time.Microsecond,
			want: time.Duration(fnv("x")%10_000) * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, SpreadOffset(tt.id, tt.window))
			require.Equal(t, tt.want, SpreadOffset(tt.id, tt.window), "deterministic")
		})
	}
}

func TestSpreadOffsetBoundedAndUniform(t *testing.T) {
	t.Parallel()
	const (
		n       = 100_000
		buckets = 20
		window  = time.Minute
	)
	var counts [buckets]int
	for i := range n {
		// UUIDv7-like ids: a shared time prefix, the variety in the tail.
		id := fmt.Sprintf("0190a5b2-7c3d-7e4f-%04x-%012x", i%0x10000, i*7919)
		off := SpreadOffset(id, window)
		require.GreaterOrEqual(t, off, time.Duration(0))
		require.Less(t, off, window)
		require.Zero(t, off%time.Millisecond)
		counts[off*buckets/window]++
	}
	for b, c := range counts {
		// Expect n/buckets = 5,000 per bucket; a standard deviation is
		// about 70, so 10% is far outside chance.
		require.InDeltaf(t, n/buckets, c, n/buckets/10, "bucket %d", b)
	}
}
