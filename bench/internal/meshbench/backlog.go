package meshbench

import (
	"context"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/cronmesh/cronmesh/bench/internal/report"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/libs/promhist"
)

// backlog is where slots wait at one moment: committed by the trigger but
// not yet published (its outbox), or published but not yet taken by the
// dispatcher (the dispatch queues' ready messages).
type backlog struct {
	at       time.Time
	outbox   int
	dispatch int
}

// sampleBacklog reads both; -1 when a count could not be read.
func (e *env) sampleBacklog(ctx context.Context) backlog {
	b := backlog{at: time.Now(), outbox: -1, dispatch: -1}
	// Slots, not rows: a grouped row holds many (outbox.WriteGrouped).
	if n, err := outbox.PendingMessages(ctx, e.trigger); err == nil {
		b.outbox = int(n)
	}
	ch, err := e.amqp.Channel()
	if err != nil {
		return b
	}
	defer ch.Close()
	n := 0
	for _, q := range broker.DispatchQueues(e.mesh.Names.Dispatch, e.mesh.Names.DispatchQueue) {
		st, err := ch.QueueDeclarePassive(q.Queue, true, false, false, false, nil)
		if err != nil {
			return b
		}
		n += st.Messages
	}
	b.dispatch = n
	return b
}

// backlogSummary is "median m, max x" of a backlog series.
func backlogSummary(bs []backlog, pick func(backlog) int) string {
	var v []int
	for _, b := range bs {
		if n := pick(b); n >= 0 {
			v = append(v, n)
		}
	}
	if len(v) == 0 {
		return "-"
	}
	slices.Sort(v)
	return "median " + report.Num(v[len(v)/2]) + ", max " + report.Num(v[len(v)-1])
}

// quantileBound renders promhist.QuantileBound of the observations
// between two scrapes: "≤ 0.25 s", "> 5 s" past the last finite bucket,
// "-" with none.
func quantileBound(a, b promhist.Histogram, q float64) string {
	bound, _ := promhist.QuantileBound(a, b, q)
	switch {
	case math.IsNaN(bound):
		return "-"
	case math.IsInf(bound, 1):
		return "> " + strconv.FormatFloat(promhist.BelowLast(b), 'g', -1, 64) + " s"
	}
	return "≤ " + strconv.FormatFloat(bound, 'g', -1, 64) + " s"
}
