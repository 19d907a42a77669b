package meshbench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/cronmesh/cronmesh/bench/internal/report"
	"github.com/cronmesh/cronmesh/bench/internal/target"
)

// stages splits the lateness of a window's executions at the two moments
// the history records for each: the trigger's fire time (its timer handed
// the slot to a commit, which then writes the ledger and the outbox) and
// the dispatcher's start time (the request taken from the queue and
// checked, the HTTP call about to start). Every clock is this machine's,
// so the differences are exact to the trigger's clock correction
// (timesync; about 0 on one host).
type stages struct {
	executions int             // executions of the window the history holds
	matched    int             // of those, delivered to the target
	fire       []time.Duration // nominal → fire time (the trigger's timer)
	queue      []time.Duration // fire time → started (commit, outbox, relay, broker, dispatcher's queue and look-up)
	call       []time.Duration // started → arrival at the target (the HTTP call)
}

// measureStages reads the fire and start times of the window's executions
// from the history's schema and matches them with the target's first
// delivery of each execution id. It reads the table directly, not the
// history API: this is a measurement of the mesh, not a user of it.
func (e *env) measureStages(ctx context.Context, from, to time.Time, deliveries []target.Delivery) (stages, error) {
	arrival := make(map[uuid.UUID]time.Time, len(deliveries))
	for _, d := range deliveries {
		if at, seen := arrival[d.WebhookID]; !seen || d.At.Before(at) {
			arrival[d.WebhookID] = d.At
		}
	}
	query := fmt.Sprintf(`SELECT execution_id, nominal_time, fire_time, start_time FROM %s.executions
WHERE nominal_time >= $1 AND nominal_time < $2 AND fire_time IS NOT NULL AND start_time IS NOT NULL AND attempt = 1`,
		pgx.Identifier{e.mesh.Schemas["history"]}.Sanitize())
	rows, err := e.db.Query(ctx, query, from, to)
	if err != nil {
		return stages{}, fmt.Errorf("read the history's executions: %w", err)
	}
	var (
		s                    stages
		id                   uuid.UUID
		nominal, fire, start time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &nominal, &fire, &start}, func() error {
		s.executions++
		at, ok := arrival[id]
		if !ok {
			return nil
		}
		s.matched++
		s.fire = append(s.fire, fire.Sub(nominal))
		s.queue = append(s.queue, start.Sub(fire))
		s.call = append(s.call, at.Sub(start))
		return nil
	})
	if err != nil {
		return stages{}, fmt.Errorf("read the history's executions: %w", err)
	}
	for _, d := range [][]time.Duration{s.fire, s.queue, s.call} {
		slices.Sort(d)
	}
	return s, nil
}

// rows is the report's table of the stages.
func (s stages) rows() [][]string {
	row := func(name string, d []time.Duration) []string {
		if len(d) == 0 {
			return []string{name, "-", "-", "-", "-"}
		}
		return []string{name, report.Ms(report.Quantile(d, 0.5)), report.Ms(report.Quantile(d, 0.9)), report.Ms(report.Quantile(d, 0.99)), report.Ms(d[len(d)-1])}
	}
	return [][]string{
		row("nominal → fire time (the trigger's timer hands the slot to a commit)", s.fire),
		row("fire time → started (the commit, outbox and relay, broker, the dispatcher's queue and look-up)", s.queue),
		row("started → arrived (the HTTP call to the target)", s.call),
	}
}
