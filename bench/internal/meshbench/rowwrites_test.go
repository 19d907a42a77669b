package meshbench

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/bench/internal/report"
)

// TestRowWritesTableDividesTheWindowsWritesByExecutions: the table holds
// the writes between the two readings per execution, most written table
// first, leaves out tables not written in between, and sums them.
func TestRowWritesTableDividesTheWindowsWritesByExecutions(t *testing.T) {
	t.Parallel()
	before := rowWrites{walBytes: 1000, tables: map[string]tableWrites{
		"s.outbox": {inserted: 10, deleted: 10},
		"s.jobs":   {updated: 5, hot: 1},
		"s.idle":   {inserted: 7},
	}}
	after := rowWrites{walBytes: 1000 + 4*2500, tables: map[string]tableWrites{
		"s.outbox": {inserted: 14, deleted: 14},
		"s.jobs":   {updated: 9, hot: 3},
		"s.idle":   {inserted: 7},
		"s.ledger": {inserted: 4},
	}}
	var d report.Doc
	rowWritesTable(&d, before, after, 4)
	got := d.String()
	require.Contains(t, got, "**2500 bytes of WAL per execution**")
	require.Contains(t, got, "| `s.outbox` | 1.00 | 0.00 | 0.00 | 1.00 | 2.00 |")
	require.Contains(t, got, "| `s.jobs` | 0.00 | 1.00 | 0.50 | 0.00 | 1.00 |")
	require.Contains(t, got, "| `s.ledger` | 1.00 | 0.00 | 0.00 | 0.00 | 1.00 |")
	require.Contains(t, got, "| **all** | 2.00 | 1.00 | 0.50 | 1.00 | **4.00** |")
	require.NotContains(t, got, "s.idle")
	require.Less(t, strings.Index(got, "s.outbox"), strings.Index(got, "s.jobs"), "the most written table first")
}
