package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/execid"
)

const ingestJobs = 1000

// ingest publishes o.events lifecycle events as the dispatcher does (an
// ExecutionEventBatch of o.batch events per message, routed by the first
// event's kind) and measures how fast the history service commits them:
// from the first publish until its history_events_ingested_total counter
// has grown by o.events.
func ingest(ctx context.Context, out io.Writer, o options) error {
	if o.exchange == "" {
		return errors.New("--exchange is required")
	}
	bodies, keys := ingestMessages(o)
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
		if last.ingested-base.ingested >= float64(o.events) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %.0f of %d events committed after 15 minutes", last.ingested-base.ingested, o.events)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	rate := float64(o.events) / elapsed.Seconds()
	batches := last.batchCount - base.batchCount
	fmt.Fprintf(out, "\n### Ingest\n\n")
	fmt.Fprintf(out, "%d events (%d executions of %d jobs, each a STARTED and a SUCCEEDED in consecutive messages), %d messages of %d events, %d publishers with confirms, published in %.2f s.\n\n",
		o.events, o.events/2, ingestJobs, len(bodies), o.batch, o.publishers, published.Seconds())
	fmt.Fprintf(out, "| metric | value |\n| --- | ---: |\n")
	fmt.Fprintf(out, "| first publish to last commit | %.2f s |\n", elapsed.Seconds())
	fmt.Fprintf(out, "| events committed per second | %.0f |\n", rate)
	if batches > 0 {
		fmt.Fprintf(out, "| write transactions | %.0f (mean %.0f events each) |\n", batches, (last.batchSum-base.batchSum)/batches)
	}
	fmt.Fprintf(out, "\n- %s ingest at least 10,000 events/s: %.0f events/s\n", verdict(rate >= 10000), rate)
	loadNow(out, "after the ingest")
	return nil
}

// ingestMessages builds every message before the clock starts. Message k
// carries the STARTED events of executions chunk k and the SUCCEEDED events
// of chunk k-1, so half the writes are updates of rows inserted by the
// previous message, as in production.
func ingestMessages(o options) ([][]byte, []string) {
	per := o.batch / 2
	execs := o.events / 2
	jobs := make([]string, ingestJobs)
	for i := range jobs {
		jobs[i] = uuid.NewString()
	}
	day := time.Now().UTC().Add(-24 * time.Hour).Truncate(time.Minute)
	now := time.Now().UTC()
	event := func(i int, kind eventsv1.ExecutionEventKind) *eventsv1.ExecutionEvent {
		job := jobs[i%ingestJobs]
		nominal := day.Add(time.Duration(i/ingestJobs) * time.Second)
		e := &eventsv1.ExecutionEvent{
			EventId: uuid.NewString(), Kind: kind, ExecutionId: execid.For(job, nominal), JobId: job, Namespace: "bench",
			Attempt: 1, NominalTime: timestamppb.New(nominal), OccurTime: timestamppb.New(now), FireTime: timestamppb.New(nominal),
			StartTime: timestamppb.New(nominal.Add(2 * time.Millisecond)), TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED,
			TraceId: strings.ReplaceAll(uuid.NewString(), "-", ""), JobDisplayName: "bench job",
		}
		if kind == eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED {
			e.Duration, e.ResponseStatus = durationpb.New(35*time.Millisecond), 200
			e.ResponseExcerpt = fmt.Sprintf(`{"status":"ok","processed":%d,"batch":"b-%d"}`, i%977, i)
		}
		return e
	}
	var bodies [][]byte
	var keys []string
	for k := 0; k*per <= execs; k++ {
		var events []*eventsv1.ExecutionEvent
		for i := k * per; i < min((k+1)*per, execs); i++ {
			events = append(events, event(i, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED))
		}
		if k > 0 {
			for i := (k - 1) * per; i < min(k*per, execs); i++ {
				events = append(events, event(i, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED))
			}
		}
		if len(events) == 0 {
			break
		}
		b, err := proto.Marshal(&eventsv1.ExecutionEventBatch{Events: events})
		if err != nil {
			panic(err)
		}
		bodies = append(bodies, b)
		keys = append(keys, "execution."+strings.ToLower(strings.TrimPrefix(events[0].GetKind().String(), "EXECUTION_EVENT_KIND_")))
	}
	return bodies, keys
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
