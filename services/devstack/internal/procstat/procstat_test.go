package procstat_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/services/devstack/internal/procstat"
)

func TestSnapshotReadsThisProcess(t *testing.T) {
	t.Parallel()
	r := procstat.NewReader()
	before := r.Snapshot(map[string]int{"me": os.Getpid()})
	// Burn some CPU so the difference is visible at the clock tick.
	deadline := time.Now().Add(200 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	after := r.Snapshot(map[string]int{"me": os.Getpid()})
	require.Positive(t, x)
	require.Positive(t, procstat.CPU(before, after, "me"))
	require.Positive(t, procstat.HWM(after, "me"))
	require.GreaterOrEqual(t, procstat.HWM(after, "me"), procstat.RSS(after, "me"))
	_, ok := r.Read(1 << 30)
	require.False(t, ok, "no such process")
	require.NotEqual(t, "unknown", procstat.LoadAverage())
	busy, total := procstat.MachineBusy()
	require.Positive(t, total)
	require.LessOrEqual(t, busy, total)
}
