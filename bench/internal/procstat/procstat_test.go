package procstat_test

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/bench/internal/procstat"
)

func TestBetweenAttributesThisProcess(t *testing.T) {
	t.Parallel()
	s := procstat.New()
	me := map[string]int{"me": os.Getpid()}
	before := s.Snapshot(me)
	require.NoError(t, before.Err)
	// Burn some CPU so the difference is visible at the clock tick.
	deadline := time.Now().Add(200 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	after := s.Snapshot(me)
	require.Positive(t, x)
	u := procstat.Between(before, after)
	require.NoError(t, u.Err)
	require.Positive(t, u.CPU["me"])
	require.Positive(t, u.Busy, "this test spun a core")
	require.LessOrEqual(t, u.Busy, time.Duration(runtime.NumCPU())*u.Wall+100*time.Millisecond)
	require.LessOrEqual(t, u.Steal, u.Busy)
	require.GreaterOrEqual(t, u.CPU[procstat.Other], time.Duration(0))
	require.Equal(t, u.CPU["me"], u.Named()-u.CPU[procstat.Postgres]-u.CPU[procstat.RabbitMQ])
	require.Positive(t, after.HWM("me"))
	require.GreaterOrEqual(t, after.HWM("me"), after.RSS("me"))
	require.Equal(t, "me", after.Procs[os.Getpid()].Group)
	require.NotEqual(t, "unknown", procstat.LoadAverage())
	p, ok := s.Proc(os.Getpid())
	require.True(t, ok)
	require.GreaterOrEqual(t, p.CPU, after.Procs[os.Getpid()].CPU)
	require.Positive(t, p.HWM)
	parent, ok := procstat.Parent(os.Getpid())
	require.True(t, ok)
	require.Equal(t, os.Getppid(), parent)
	_, ok = s.Proc(1 << 30)
	require.False(t, ok, "no such process")
}

func TestBetweenSkipsEndedAndReusedPIDs(t *testing.T) {
	t.Parallel()
	at := time.Now()
	from := procstat.Snapshot{At: at, Procs: map[int]procstat.Proc{
		10: {Group: "svc", Comm: "svc", PPID: 1, CPU: 5 * time.Second},
		11: {Group: procstat.Postgres, Comm: "postgres", PPID: 1, CPU: 10 * time.Second},
		12: {Group: procstat.Postgres, Comm: "postgres", PPID: 11, CPU: 2 * time.Second}, // a worker that ends
		13: {Group: procstat.Other, Comm: "old", PPID: 1, CPU: 9 * time.Second},
	}}
	to := procstat.Snapshot{At: at.Add(10 * time.Second), Procs: map[int]procstat.Proc{
		10: {Group: "svc", Comm: "svc", PPID: 1, CPU: 7 * time.Second},
		// The postmaster reaped the worker: its 2 s before the window and
		// 1 s in it are in the postmaster's time now.
		11: {Group: procstat.Postgres, Comm: "postgres", PPID: 1, CPU: 14 * time.Second},
		13: {Group: "svc2", Comm: "new", PPID: 1, CPU: time.Second}, // pid reused
		14: {Group: "svc2", Comm: "svc2", PPID: 1, CPU: 3 * time.Second},
	}, Machine: procstat.MachineCPU{Busy: 20 * time.Second, Total: 20 * time.Second}}
	u := procstat.Between(from, to)
	require.Equal(t, 2*time.Second, u.CPU["svc"])
	require.Equal(t, 2*time.Second, u.CPU[procstat.Postgres], "4 s of the postmaster less the worker's 2 s before the window")
	require.Equal(t, 3*time.Second, u.CPU["svc2"], "a new pid counts whole; a reused one not at all")
	require.Equal(t, 13*time.Second, u.CPU[procstat.Other], "machine busy less the named groups")
	require.InDelta(t, 2.0, u.Of(20*time.Second), 1e-9)
}
