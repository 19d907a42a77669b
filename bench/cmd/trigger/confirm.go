package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	benchreport "github.com/cronmesh/cronmesh/bench/internal/report"
	"github.com/cronmesh/cronmesh/libs/promhist"
)

// confirmHistogram is the nodes' lateness of fired slots from their firing
// time (nominal + spread offset) to the broker's confirm of their
// DispatchRequest, as the trigger's relay observes it on the node's clock:
// the issue's own measure, where arrival at the bench's consumer is only an
// upper bound of it.
const confirmHistogram = "outbox_due_to_confirm_seconds"

// confirms is what the nodes' confirmHistogram observed between a reading
// at from and one at to, summed over the nodes: the slots confirmed in
// between, whatever their nominal time. A quantile is known only to its
// bucket; the share within targetP99, a bucket's bound, is exact.
type confirms struct {
	from, to      time.Time
	before, after promhist.Histogram
	// err is either reading's: a node left out of one reading makes the
	// difference meaningless, so nothing is reported.
	err error
}

// readConfirms takes the first reading, now.
func readConfirms(ctx context.Context, e *env) *confirms {
	c := &confirms{from: time.Now()}
	c.before, c.err = promhist.Scrape(ctx, e.nodeURLs(), confirmHistogram)
	return c
}

// end takes the second reading, now.
func (c *confirms) end(ctx context.Context, e *env) {
	c.to = time.Now()
	var err error
	c.after, err = promhist.Scrape(ctx, e.nodeURLs(), confirmHistogram)
	c.err = errors.Join(c.err, err)
	if c.err != nil {
		logf("reading %s: %v", confirmHistogram, c.err)
	}
}

// count is how many confirms were observed; 0 when a reading failed.
func (c *confirms) count() int {
	if c.err != nil {
		return 0
	}
	_, n := promhist.QuantileBound(c.before, c.after, 1)
	return int(n)
}

// bound renders the bucket bound of the q-quantile in unit (ms or benchreport.Secs):
// "≤ 100.0 ms", "> 60000.0 ms" past the last finite bucket, "-" with no
// observation.
func (c *confirms) bound(q float64, unit func(time.Duration) string) string {
	if c.err != nil {
		return "-"
	}
	b, _ := promhist.QuantileBound(c.before, c.after, q)
	switch {
	case math.IsNaN(b):
		return "-"
	case math.IsInf(b, 1):
		return "> " + unit(seconds(promhist.BelowLast(c.after)))
	}
	return "≤ " + unit(seconds(b))
}

// within is the share confirmed within targetP99, NaN when unknown.
func (c *confirms) within() float64 {
	if c.err != nil {
		return math.NaN()
	}
	share, _ := promhist.ShareAtMost(c.before, c.after, targetP99.Seconds())
	return share
}

// withinText renders within as "99.73 % ≤ 100 ms", or "-".
func (c *confirms) withinText() string {
	share := c.within()
	if math.IsNaN(share) {
		return "-"
	}
	return fmt.Sprintf("%.2f %% ≤ %d ms", 100*share, targetP99.Milliseconds())
}

// confirmsNote writes what the broker-confirm row of the lateness table
// stands for, and the exact share within targetP99.
func (r *report) confirmsNote(c *confirms) {
	if c.err != nil {
		r.p("The nodes' `%s` could not be read, so the broker-confirm row is empty: %v", confirmHistogram, c.err)
		r.p("")
		return
	}
	r.p("The broker-confirm row is the trigger's own `%s` (firing time = nominal + spread offset → the broker's confirm of the DispatchRequest, on the node's clock), summed over the nodes, for the slots confirmed between its readings at %s and %s, whatever their nominal time; its quantiles are bucket bounds. "+
		"Confirmed within %d ms of their firing time (cumulative count of the %g s bucket, exact): **%s** of %s slots.",
		confirmHistogram, c.from.Format("15:04:05.000"), c.to.Format("15:04:05.000"),
		targetP99.Milliseconds(), targetP99.Seconds(), c.withinText(), benchreport.Num(c.count()))
	r.p("")
}

// seconds converts a bucket bound in seconds to a duration.
func seconds(s float64) time.Duration {
	return time.Duration(math.Round(s * float64(time.Second)))
}

// nodeURLs are the base URLs of the nodes' HTTP servers (/metrics).
func (e *env) nodeURLs() []string {
	urls := make([]string, 0, len(e.nodes))
	for _, n := range e.nodes {
		urls = append(urls, "http://"+n.addr)
	}
	return urls
}
