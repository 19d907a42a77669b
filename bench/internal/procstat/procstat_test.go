package procstat_test

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/bench/internal/procstat"
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
	cores := runtime.NumCPU()
	busy, steal := m0.Share(procstat.ReadMachineCPU(), cores)
	require.Positive(t, busy, "this test spun a core")
	require.LessOrEqual(t, busy, 100*float64(cores))
	require.LessOrEqual(t, steal, busy)
}

func TestShareOfAFullyBusyMachineIsExact(t *testing.T) {
	t.Parallel()
	for total := uint64(1); total < 1000; total++ {
		from := procstat.MachineCPU{}
		to := procstat.MachineCPU{Busy: total, Steal: total, Total: total}
		busy, steal := from.Share(to, 2)
		require.Equal(t, 200.0, busy, "total %d", total)
		require.Equal(t, 200.0, steal, "total %d", total)
	}
}
