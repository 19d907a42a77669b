package meshbench

import (
	"context"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/cronmesh/cronmesh/bench/internal/report"
	"github.com/cronmesh/cronmesh/libs/broker"
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

// sampleBacklog reads both; -1 when a count could not be read. Neither
// touches PostgreSQL, since it runs inside the measured window: counting
// the outbox's rows there was a sequential scan of a table that every
// execution churns (179 ms a call at 3,000/s), work of the benchmark
// that the window charged to the product.
func (e *env) sampleBacklog(ctx context.Context) backlog {
	b := backlog{at: time.Now(), outbox: -1, dispatch: -1}
	if n, err := e.unpublished(ctx); err == nil {
		b.outbox = n
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

// unpublished is how many fired slots the trigger nodes' outbox relays
// have not published yet, from the nodes' counters, each node read once:
// the slots their commits fired (trigger_slots_total, scheduled and
// catch-up; a missed slot is no dispatch message) less the messages their
// relays published (outbox_published_total). The benchmark's load fires
// nothing else (no run-now, no backfill, no missed slot in a healthy
// run), so the two count the same messages; a message published twice
// (possible duplicates, after a failure) would make it low, so it is
// never below 0. A node that cannot be read fails it.
func (e *env) unpublished(ctx context.Context) (int, error) {
	c, err := promhist.ScrapeCounters(ctx, e.triggerURLs(), "kind", "trigger_slots_total", "outbox_published_total")
	if err != nil {
		return 0, err
	}
	fired := c["trigger_slots_total"]["scheduled"] + c["trigger_slots_total"]["catch_up"]
	return max(int(fired-c["outbox_published_total"][""]), 0), nil
}

// triggerURLs are the base URLs of the mesh's trigger nodes.
func (e *env) triggerURLs() []string {
	urls := make([]string, 0, len(e.mesh.Triggers))
	for _, p := range e.mesh.Triggers {
		urls = append(urls, p.URL)
	}
	return urls
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
