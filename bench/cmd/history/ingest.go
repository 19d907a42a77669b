package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cronmesh/cronmesh/bench/internal/eventmix"
	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/execevent"
	"github.com/cronmesh/cronmesh/libs/execid"
)

const ingestJobs = 1000

// ingest publishes about o.events lifecycle events in the dispatcher's mix
// (see ingestMessages) as the dispatcher does (an ExecutionEventBatch of
// about o.batch events per message, routed by the first event's kind) and
// measures how fast the history service commits them: from the first
// publish until its history_events_ingested_total counter has grown by
// the events published.
func ingest(ctx context.Context, out io.Writer, o options) error {
	if o.exchange == "" {
		return errors.New("--exchange is required")
	}
	mix, err := eventmix.NewMix(o.slowShare)
	if err != nil {
		return err
	}
	plan := ingestMessages(o, mix)
	bodies, keys := plan.bodies, plan.keys
	base, err := scrape(ctx, o.historyURL)
	if err != nil {
		return err
	}
	conn, err := amqp091.Dial(o.amqpURL)
	if err != nil {
		return err
	}
	defer conn.Close()

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, o.publishers)
	for p := range o.publishers {
		wg.Go(func() {
			if err := publishShare(ctx, conn, o.exchange, bodies, keys, p, o.publishers); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	published := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	var last metrics
	deadline := time.Now().Add(15 * time.Minute)
	for {
		last, err = scrape(ctx, o.historyURL)
		if err != nil {
			return err
		}
		if last.ingested-base.ingested >= float64(plan.events) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %.0f of %d events committed after 15 minutes", last.ingested-base.ingested, plan.events)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	rate := float64(plan.events) / elapsed.Seconds()
	batches := last.batchCount - base.batchCount
	fmt.Fprintf(out, "\n### Ingest\n\n")
	fmt.Fprintf(out, "%d events of %d executions of %d jobs, one attempt each, a SUCCEEDED per execution: %s. A slow execution's STARTED goes one message before its SUCCEEDED (%d executions slow). %d messages of about %d events, %d publishers with confirms, published in %.2f s.\n\n",
		plan.events, plan.executions, ingestJobs, mix.Describe(), plan.slowExec, len(bodies), o.batch, o.publishers, published.Seconds())
	fmt.Fprintf(out, "Events/s compares across reports only under the same mix: in the mix before ADR 0021 an execution was two events, its row inserted by one and updated by the other; in production's an execution is mostly one event, one insert. Executions/s is the figure that compares across mixes.\n\n")
	fmt.Fprintf(out, "| metric | value |\n| --- | ---: |\n")
	fmt.Fprintf(out, "| first publish to last commit | %.2f s |\n", elapsed.Seconds())
	fmt.Fprintf(out, "| events committed per second | %.0f |\n", rate)
	fmt.Fprintf(out, "| executions committed per second | %.0f |\n", float64(plan.executions)/elapsed.Seconds())
	if batches > 0 {
		fmt.Fprintf(out, "| write transactions | %.0f (mean %.0f events each) |\n", batches, (last.batchSum-base.batchSum)/batches)
	}
	fmt.Fprintf(out, "\n- %s ingest at least 10,000 events/s: %.0f events/s (%s)\n", verdict(rate >= 10000), rate, mixName(mix))
	loadNow(out, "after the ingest")
	return nil
}

// ingestPlan is the messages of an ingest run, built before the clock
// starts, and what they hold.
type ingestPlan struct {
	bodies               [][]byte
	keys                 []string
	events               int
	executions, slowExec int
}

// ingestMessages builds every message of an ingest of at least o.events
// events in mix (one more when the last execution is slow): executions of
// one attempt each, a SUCCEEDED per execution and a STARTED before it for
// a slow one. Executions are taken in chunks sized so that a message holds
// about o.batch events; message k carries the STARTED events of chunk k's
// slow executions and the SUCCEEDED events of chunk k-1, so a slow
// execution's row is inserted by one message and updated by the next, as
// when the dispatcher sends its STARTED a quarter of a second before its
// outcome, and a quick one's row is inserted by its outcome alone.
func ingestMessages(o options, mix eventmix.Mix) ingestPlan {
	execs := int(float64(o.events) / (1 + mix.SlowShare))
	for mix.Events(execs) < o.events {
		execs++
	}
	for execs > 0 && mix.Events(execs-1) >= o.events {
		execs--
	}
	per := max(1, int(math.Round(float64(o.batch)/(1+mix.SlowShare))))
	jobs := make([]string, ingestJobs)
	for i := range jobs {
		jobs[i] = uuid.NewString()
	}
	day := time.Now().UTC().Add(-24 * time.Hour).Truncate(time.Minute)
	attempts := make([]eventmix.Attempt, execs)
	for i := range attempts {
		job := jobs[i%ingestJobs]
		nominal := day.Add(time.Duration(i/ingestJobs) * time.Second)
		took := eventmix.QuickDuration
		if mix.Slow(i) {
			took = eventmix.SlowDuration
		}
		attempts[i] = eventmix.Attempt{
			Request: &dispatchv1.DispatchRequest{
				ExecutionId: execid.For(job, nominal), JobId: job, Namespace: "bench", Attempt: 1,
				NominalTime: timestamppb.New(nominal), FireTime: timestamppb.New(nominal),
				TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED, JobDisplayName: "bench job",
			},
			Start: nominal.Add(2 * time.Millisecond), Duration: took,
			Outcome: eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, Status: 200,
			Excerpt: fmt.Sprintf(`{"status":"ok","processed":%d,"batch":"b-%d"}`, i%977, i),
			Trace:   eventmix.NewTrace(),
		}
	}
	plan := ingestPlan{executions: execs, slowExec: mix.SlowCount(execs)}
	for k := 0; (k-1)*per < execs; k++ {
		var events []*eventsv1.ExecutionEvent
		for i := k * per; i < min((k+1)*per, execs); i++ {
			if mix.Slow(i) {
				events = append(events, eventmix.Started(attempts[i]))
			}
		}
		if k > 0 {
			for i := (k - 1) * per; i < min(k*per, execs); i++ {
				events = append(events, eventmix.Outcome(attempts[i]))
			}
		}
		if len(events) == 0 {
			continue
		}
		b, err := proto.Marshal(&eventsv1.ExecutionEventBatch{Events: events})
		if err != nil {
			panic(err)
		}
		plan.bodies = append(plan.bodies, b)
		plan.keys = append(plan.keys, execevent.RoutingKey(events))
		plan.events += len(events)
	}
	return plan
}

// publishShare publishes messages p, p+n, p+2n, ... with confirms, up to
// 256 unconfirmed at once.
func publishShare(ctx context.Context, conn *amqp091.Connection, exchange string, bodies [][]byte, keys []string, p, n int) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	var pending []*amqp091.DeferredConfirmation
	wait := func() error {
		for _, dc := range pending {
			ok, err := dc.WaitContext(ctx)
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("the broker nacked a message")
			}
		}
		pending = pending[:0]
		return nil
	}
	for i := p; i < len(bodies); i += n {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, keys[i], true, false, amqp091.Publishing{
			MessageId: uuid.NewString(), Body: bodies[i], DeliveryMode: amqp091.Persistent, ContentType: "application/protobuf",
		})
		if err != nil {
			return err
		}
		pending = append(pending, dc)
		if len(pending) >= 256 {
			if err := wait(); err != nil {
				return err
			}
		}
	}
	return wait()
}

type metrics struct{ ingested, batchSum, batchCount float64 }

// scrape reads the service's ingest counters from /metrics.
func scrape(ctx context.Context, base string) (metrics, error) {
	var m metrics
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return m, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		switch name {
		case "history_events_ingested_total":
			m.ingested += v
		case "history_ingest_batch_events_sum":
			m.batchSum += v
		case "history_ingest_batch_events_count":
			m.batchCount += v
		}
	}
	return m, sc.Err()
}

// mixName is the mix in a few words, for the verdict line.
func mixName(m eventmix.Mix) string {
	if m.SlowShare == 1 {
		return "the mix before ADR 0021, a STARTED and an outcome per execution"
	}
	return fmt.Sprintf("production's mix, --slow-share %v", m.SlowShare)
}
