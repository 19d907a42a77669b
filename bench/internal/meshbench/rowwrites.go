package meshbench

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cronmesh/cronmesh/bench/internal/report"
)

// rowWrites is what PostgreSQL counted of the mesh's tables at one moment:
// rows inserted, updated (HOT among them) and deleted, by "schema.table"
// (a partition counts for its parent), and the WAL the server wrote.
type rowWrites struct {
	tables   map[string]tableWrites
	walBytes int64
}

type tableWrites struct {
	inserted, updated, hot, deleted int64
}

func (t tableWrites) sub(u tableWrites) tableWrites {
	return tableWrites{t.inserted - u.inserted, t.updated - u.updated, t.hot - u.hot, t.deleted - u.deleted}
}

func (t tableWrites) total() int64 { return t.inserted + t.updated + t.deleted }

// statsFlush is how long to wait before reading the counters at the end of
// a measurement: PostgreSQL's backends report their table counts at most
// once a second while busy and after 10 s idle, so counts of the last
// transactions of the window reach pg_stat_user_tables only then.
const statsFlush = 11 * time.Second

// readRowWrites reads the counters of the mesh's schemas and pg_stat_wal.
func (e *env) readRowWrites(ctx context.Context) (rowWrites, error) {
	schemas := slices.Sorted(maps.Values(e.mesh.Schemas))
	rows, err := e.db.Query(ctx, `
		SELECT n.nspname || '.' || coalesce(parent.relname, c.relname),
		       sum(s.n_tup_ins)::bigint, sum(s.n_tup_upd)::bigint, sum(s.n_tup_hot_upd)::bigint, sum(s.n_tup_del)::bigint
		FROM pg_stat_user_tables s
		JOIN pg_class c ON c.oid = s.relid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
		LEFT JOIN pg_class parent ON parent.oid = i.inhparent
		WHERE n.nspname = ANY($1)
		GROUP BY 1`, schemas)
	if err != nil {
		return rowWrites{}, fmt.Errorf("read table counters: %w", err)
	}
	w := rowWrites{tables: map[string]tableWrites{}}
	for rows.Next() {
		var name string
		var t tableWrites
		if err := rows.Scan(&name, &t.inserted, &t.updated, &t.hot, &t.deleted); err != nil {
			rows.Close()
			return rowWrites{}, fmt.Errorf("read table counters: %w", err)
		}
		w.tables[name] = t
	}
	if err := rows.Err(); err != nil {
		return rowWrites{}, fmt.Errorf("read table counters: %w", err)
	}
	if err := e.db.QueryRow(ctx, `SELECT wal_bytes::bigint FROM pg_stat_wal`).Scan(&w.walBytes); err != nil {
		return rowWrites{}, fmt.Errorf("read pg_stat_wal: %w", err)
	}
	return w, nil
}

// rowWritesTable reports the writes between before and after per
// execution, by table, most written first.
func rowWritesTable(d *report.Doc, before, after rowWrites, executions int) {
	if executions <= 0 {
		return
	}
	type table struct {
		name string
		tableWrites
	}
	var tables []table
	var sum tableWrites
	for name, a := range after.tables {
		t := a.sub(before.tables[name])
		if t.total() == 0 {
			continue
		}
		tables = append(tables, table{name, t})
		sum = tableWrites{sum.inserted + t.inserted, sum.updated + t.updated, sum.hot + t.hot, sum.deleted + t.deleted}
	}
	slices.SortFunc(tables, func(a, b table) int { return cmp.Or(cmp.Compare(b.total(), a.total()), cmp.Compare(a.name, b.name)) })
	per := func(n int64) string { return fmt.Sprintf("%.2f", float64(n)/float64(executions)) }
	var rows [][]string
	for _, t := range tables {
		rows = append(rows, []string{"`" + t.name + "`", per(t.inserted), per(t.updated), per(t.hot), per(t.deleted), per(t.total())})
	}
	rows = append(rows, []string{"**all**", per(sum.inserted), per(sum.updated), per(sum.hot), per(sum.deleted), "**" + per(sum.total()) + "**"})
	d.P("Row writes per execution, from PostgreSQL's counters of the mesh's schemas (`pg_stat_user_tables`, partitions counted for their table; read %s after the last delivery, when the backends have reported them); index entries are not counted, the WAL is: **%.0f bytes of WAL per execution** (`pg_stat_wal`, the whole server).",
		statsFlush, float64(after.walBytes-before.walBytes)/float64(executions))
	d.Table([]string{"table", "inserted", "updated", "of which HOT", "deleted", "row writes"}, rows)
}
