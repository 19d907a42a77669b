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
	m0 := procstat.ReadMachineCPU()
	require.Positive(t, m0.Total)
	require.LessOrEqual(t, m0.Busy, m0.Total)
	require.LessOrEqual(t, m0.Steal, m0.Busy)
	spinUntil := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(spinUntil) {
	}
	busy, steal := m0.Share(procstat.ReadMachineCPU(), 2)
	require.Positive(t, busy, "this test spun a core")
	require.LessOrEqual(t, busy, 200.0)
	require.LessOrEqual(t, steal, busy)
}
