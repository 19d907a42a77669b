package report_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/bench/internal/procstat"
	"github.com/cronmesh/cronmesh/bench/internal/report"
)

func TestQuantile(t *testing.T) {
	t.Parallel()
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	require.Equal(t, time.Duration(5), report.Quantile(d, 0.5))
	require.Equal(t, time.Duration(10), report.Quantile(d, 0.99))
	require.Equal(t, time.Duration(1), report.Quantile(d, 0))
	require.Zero(t, report.Quantile(nil, 0.5))
}

func TestFormats(t *testing.T) {
	t.Parallel()
	require.Equal(t, "1,234,567", report.Num(1234567))
	require.Equal(t, "-1,000", report.Num(-1000))
	require.Equal(t, "999", report.Num(int64(999)))
	require.Equal(t, "2,500", report.Rate(2499.6))
	require.Equal(t, "1.5 MiB", report.MiB(uint64(3<<19)))
	require.Equal(t, "2.00 GiB", report.MiB(float64(2<<30)))
	require.Equal(t, "421 ms", report.Ms(421*time.Millisecond))
	require.Equal(t, "1.25 ms", report.Ms(1250*time.Microsecond))
	require.Equal(t, "a 'b c' 'it'\\''s'", report.ShellQuote([]string{"a", "b c", "it's"}))
	require.Equal(t, "not judged", report.JudgeIf(false, true))
	require.Equal(t, "**missed**", report.JudgeIf(true, false))
}

func TestDocEmitAppends(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sub", "report.md")
	var d report.Doc
	d.H(2, "Title")
	d.Table([]string{"a", "b"}, [][]string{{"x|y", "1"}})
	require.NoError(t, d.Emit(path))
	require.NoError(t, d.Emit(path))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, 2*len(d.String()), len(b))
	require.Contains(t, string(b), "| x\\|y | 1 |\n")
	require.Contains(t, string(b), "| --- | ---: |\n")
}

func TestUsageTable(t *testing.T) {
	t.Parallel()
	at := time.Now()
	u := procstat.Usage{Wall: 10 * time.Second, Cores: 2, Busy: 15 * time.Second,
		CPU: map[string]time.Duration{"svc": 5 * time.Second, procstat.Postgres: 4 * time.Second, procstat.Other: 6 * time.Second}}
	end := procstat.Snapshot{At: at, Procs: map[int]procstat.Proc{1: {Group: "svc", HWM: 1 << 20, RSS: 1 << 19}}}
	var d report.Doc
	d.Usage(u, []string{"svc", procstat.Postgres}, &end)
	require.Contains(t, d.String(), "| svc | 5.0 s | 0.50 | 1.0 MiB |")
	require.Contains(t, d.String(), "| **machine busy** (all cores) | 15.0 s | 1.50 |")
}
