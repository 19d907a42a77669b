package main

import (
	"context"
	"fmt"
	"time"

	benchreport "github.com/cronmesh/cronmesh/bench/internal/report"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

// runProjection: N CREATED job events published to the jobs exchange while
// the nodes consume them; how long from the first publish until every job
// is in the trigger's schema with its next slot. With --backlog the events
// are published while no node runs (a node is started once to declare the
// queue, then stopped), and the time runs from the launch of the node(s)
// that drain them: the projection alone, not bounded by the publish rate.
// The jobs fire once a year (at midnight on 1 January), so no firing
// competes with the projection.
func runProjection(ctx context.Context, args []string) error {
	fs, c := flags("projection")
	jobs := fs.Int("jobs", 200_000, "CREATED job events to publish")
	nodes := fs.Int("nodes", 1, "trigger nodes")
	publishers := fs.Int("publishers", 8, "parallel AMQP channels publishing the job events")
	timeout := fs.Duration("timeout", 15*time.Minute, "give up waiting for the projection this long after the first publish")
	backlog := fs.Bool("backlog", false, "publish every event before starting the nodes, and time the nodes draining the queue")
	if err := fs.Parse(args); err != nil {
		return err
	}
	e, m, others, err := setUp(ctx, *c)
	if err != nil {
		return err
	}
	defer e.close()
	if *backlog {
		// A node declares the queue (with the arguments it expects) and
		// the schema, then stops: the events wait in the queue.
		n, err := e.startNode(ctx, "n0")
		if err != nil {
			return err
		}
		e.stopNode(n)
		n.killed = true // stopped on purpose
	} else if err := e.startNodes(ctx, *nodes); err != nil {
		return err
	}
	created := time.Now()
	ids := newIDs(*jobs)
	js := make([]*registryv1.Job, len(ids))
	for i, id := range ids {
		js[i] = newJob(id, i, cronSchedule("0 0 1 1 *", "UTC"), created)
	}
	logf("publishing %d CREATED events", len(js))
	var waitProfile func()
	profile := func() {
		if c.profileDir != "" {
			waitProfile = profileNodes(ctx, e, fmt.Sprintf("projection-%d", *jobs), c.profileSecs)
		}
	}
	if !*backlog {
		profile()
	}
	start := time.Now()
	if err := publishCreated(ctx, e.amqp, e.jobsX, js, *publishers); err != nil {
		return err
	}
	published := time.Now()
	logf("published in %s", published.Sub(start).Round(time.Millisecond))
	from := start
	if *backlog {
		if err := e.startNodes(ctx, *nodes); err != nil {
			return err
		}
		// The nodes start one after the other: from the first launch.
		from = e.nodes[1].started
		profile()
	}
	projected, err := e.waitProjected(ctx, len(js), *timeout-time.Since(start))
	if err != nil {
		return err
	}
	if waitProfile != nil {
		waitProfile()
	}
	took := projected.Sub(from)
	rate := float64(len(js)) / took.Seconds()
	logf("%d jobs projected in %s (%.0f events/s)", len(js), took.Round(time.Millisecond), rate)
	if o := otherBenchmarks(); o != "" {
		others = joinOthers(others, o)
	}

	var r report
	r.header(fmt.Sprintf("Trigger: projection of %s CREATED job events, %d node(s)", benchreport.Num(*jobs), *nodes), m, e, others)
	r.p("")
	if *backlog {
		r.p("%s CREATED job events (cron jobs firing once a year, so nothing fires during the run) published to the jobs exchange from %d channels with confirms while no node runs; the time runs from the launch of the node(s) until all %s jobs have their row (and next slot) in the trigger's schema, polled every 100 ms (the node's start-up, about a second, included).",
			benchreport.Num(*jobs), *publishers, benchreport.Num(*jobs))
	} else {
		r.p("%s CREATED job events (cron jobs firing once a year, so nothing fires during the run) published to the jobs exchange from %d channels with confirms while the node(s) consume; the time runs from the first publish until all %s jobs have their row (and next slot) in the trigger's schema, polled every 100 ms.",
			benchreport.Num(*jobs), *publishers, benchreport.Num(*jobs))
	}
	r.p("")
	r.p("The nodes run with the binary's projection defaults (`bin/trigger --help`).")
	r.p("")
	r.table([]string{"projection", "value"}, [][]string{
		{"events", benchreport.Num(*jobs)},
		{"published in", benchreport.Secs(published.Sub(start))},
		{"publish rate", fmt.Sprintf("%.0f events/s", float64(len(js))/published.Sub(start).Seconds())},
		{"**all projected after**", "**" + benchreport.Secs(took) + "**"},
		{"**projection rate**", fmt.Sprintf("**%.0f events/s**", rate)},
	})
	r.usageTable(e, from, projected)
	return r.emit(c.out)
}
