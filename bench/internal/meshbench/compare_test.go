package meshbench

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/bench/internal/procstat"
	"github.com/cronmesh/cronmesh/bench/internal/report"
)

// runReport is a report of one run as the scenarios write it: a title,
// the CPU paragraph and tables, then more.
func runReport(executions int, busy time.Duration, cpu map[string]time.Duration) string {
	var d report.Doc
	d.H(2, "End to end: sustained")
	writePerExecution(&d, procstat.Usage{Wall: time.Minute, Cores: 2, Busy: busy, CPU: cpu}, executions,
		[]string{"registry", "dispatcher", procstat.Postgres}, nil)
	d.P("After the table.")
	return d.String()
}

// TestCompareReadsWhatTheReportWrites: the comparison reads the CPU per
// execution back from the text perExecution writes, and tells the changed
// processes' move from the drift of the others.
func TestCompareReadsWhatTheReportWrites(t *testing.T) {
	t.Parallel()
	a, err := ParseCPUPerExecution(strings.NewReader(runReport(100_000, 60*time.Second, map[string]time.Duration{
		"registry": 2 * time.Second, "dispatcher": 20 * time.Second, procstat.Postgres: 18 * time.Second,
	})))
	require.NoError(t, err)
	require.Equal(t, 100_000, a.Executions)
	require.InDelta(t, 0.6, a.Machine, 1e-9)
	require.Equal(t, []string{"registry", "dispatcher", procstat.Postgres}, a.Processes)
	require.InDelta(t, 0.2, a.PerProcess["dispatcher"], 1e-9)

	b, err := ParseCPUPerExecution(strings.NewReader(runReport(100_000, 58*time.Second, map[string]time.Duration{
		"registry": 500 * time.Millisecond, "dispatcher": 20100 * time.Millisecond, procstat.Postgres: 18 * time.Second,
	})))
	require.NoError(t, err)
	var out strings.Builder
	require.NoError(t, Comparison{A: a, B: b, Changed: []string{"registry"}}.Write(&out))
	require.Contains(t, out.String(), "| **registry** (changed) | 0.020 | 0.005 | -0.015 | -75.0 % |")
	require.Contains(t, out.String(), "| **machine** | 0.600 | 0.580 | -0.020 | -3.3 % |")
	require.Contains(t, out.String(), "The changed processes: -0.015 ms; the unchanged: +0.001 ms. The changed processes moved by more than the unchanged ones.")

	out.Reset()
	require.NoError(t, Comparison{A: a, B: b, Changed: []string{"dispatcher"}}.Write(&out))
	require.Contains(t, out.String(), "this pair does not show the change", "the dispatcher moved less than the registry's drift")
	require.ErrorContains(t, Comparison{A: a, B: b, Changed: []string{"trigger-9"}}.Write(&out), "no process [trigger-9]")
}

func TestParseCPUPerExecutionRefusesWhatIsNotOneRun(t *testing.T) {
	t.Parallel()
	one := runReport(10, time.Second, map[string]time.Duration{"registry": time.Second})
	_, err := ParseCPUPerExecution(strings.NewReader(one + one))
	require.ErrorContains(t, err, "holds 2 runs")
	_, err = ParseCPUPerExecution(strings.NewReader("## A memory run\n\nNo CPU here.\n"))
	require.ErrorContains(t, err, "no CPU per execution")
}
