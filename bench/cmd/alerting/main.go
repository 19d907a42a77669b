// Command alerting-bench measures whether the alerting service's rule
// evaluation keeps up with 10,000 execution events/s while its watchdog
// watches 100,000 jobs. deploy/local/bench-alerting.sh runs it against a
// freshly started alerting process with its own schema, exchange and queue.
//
// It loads the jobs straight into the alerting schema's jobs table (every
// job on one interval, anchors spread evenly, the interval chosen so that
// the slots come due at the rate the events of the target rate make:
// 10.1 s and 9,901 slots/s for 10,000 events/s in production's mix),
// creates a consecutive-failures, a missed-schedule and a dead-lettered
// rule matching every job through the API (notifying a webhook sink inside
// this process), then publishes, for each slot as it comes due, the events
// of its attempt as the dispatcher emits them (bench/internal/eventmix:
// the outcome, 98% SUCCEEDED and 2% FAILED without retry, preceded by a
// STARTED for the --slow-share of slow attempts), about 100 events per
// message, to the run's exchange at the target rate for the duration. It
// samples the queue depth and the service's /metrics every second and
// writes a Markdown report.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cronmesh/cronmesh/bench/internal/eventmix"
	"github.com/cronmesh/cronmesh/bench/internal/machine"
	"github.com/cronmesh/cronmesh/bench/internal/procstat"
	benchreport "github.com/cronmesh/cronmesh/bench/internal/report"
	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1/alertingv1connect"
	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/execevent"
	"github.com/cronmesh/cronmesh/libs/jobspec"
	"github.com/cronmesh/cronmesh/libs/postgres"
)

type options struct {
	postgresURL, amqpURL, schema, exchange, queue, apiURL, out string
	alertingPID                                                int
	cleanup                                                    bool
	jobs, rate, batch, failEvery                               int
	slowShare                                                  float64
	period, duration, drain                                    time.Duration
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var o options
	fs := flag.NewFlagSet("alerting-bench", flag.ExitOnError)
	fs.StringVar(&o.postgresURL, "postgres-url", "postgres://postgres@127.0.0.1:5432/cronmesh?sslmode=disable", "database of the alerting service")
	fs.StringVar(&o.amqpURL, "amqp-url", "amqp://guest:guest@127.0.0.1:5672/", "broker")
	fs.StringVar(&o.schema, "schema", "", "the alerting service's schema (required)")
	fs.StringVar(&o.exchange, "exchange", "", "the run's execution event exchange (required)")
	fs.StringVar(&o.queue, "queue", "", "the alerting service's execution event queue (required)")
	fs.StringVar(&o.apiURL, "api-url", "http://127.0.0.1:8085", "the alerting service's address (API and /metrics)")
	fs.StringVar(&o.out, "out", "", "report file (default stdout)")
	fs.IntVar(&o.alertingPID, "alerting-pid", 0, "pid of the alerting process (for its CPU and memory)")
	fs.IntVar(&o.jobs, "jobs", 100000, "jobs watched")
	fs.IntVar(&o.rate, "rate", 10000, "events per second published")
	fs.IntVar(&o.batch, "batch", 100, "events per message (about: a message holds whole slots)")
	fs.IntVar(&o.failEvery, "fail-every", 50, "one outcome in this many is a FAILED without retry; 0: none")
	fs.Float64Var(&o.slowShare, "slow-share", eventmix.DefaultSlowShare, eventmix.SlowShareUsage)
	fs.DurationVar(&o.period, "period", 0, "every job's interval (default: the one at which the jobs' slots come due as fast as --rate publishes them, jobs × (1 + slow-share) / rate; 20 s for the defaults before ADR 0021)")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "how long to publish")
	fs.DurationVar(&o.drain, "drain", 120*time.Second, "how long to wait for the queue to drain after publishing")
	fs.BoolVar(&o.cleanup, "cleanup", false, "delete the queues and exchanges named (comma-separated) by --queue and --exchange, then exit")
	_ = fs.Parse(os.Args[1:])
	if o.cleanup {
		if err := cleanup(o); err != nil {
			fmt.Fprintln(os.Stderr, "alerting-bench:", err)
			os.Exit(1)
		}
		return
	}
	if o.schema == "" || o.exchange == "" || o.queue == "" {
		fmt.Fprintln(os.Stderr, "alerting-bench: --schema, --exchange and --queue are required")
		os.Exit(2)
	}
	mix, err := eventmix.NewMix(o.slowShare)
	if err != nil || o.rate <= 0 || o.batch <= 0 || o.jobs <= 0 {
		fmt.Fprintln(os.Stderr, "alerting-bench: --rate, --batch and --jobs must be positive and --slow-share within 0 and 1")
		os.Exit(2)
	}
	if o.period == 0 {
		o.period = slotPeriod(o.jobs, o.rate, mix)
	}
	if o.period < jobspec.MinInterval {
		fmt.Fprintf(os.Stderr, "alerting-bench: the jobs' interval %s is below %s: give more --jobs or a lower --rate\n", o.period, jobspec.MinInterval)
		os.Exit(2)
	}
	if err := run(ctx, o, mix); err != nil {
		fmt.Fprintln(os.Stderr, "alerting-bench:", err)
		os.Exit(1)
	}
}

// cleanup deletes a run's queues and exchanges.
func cleanup(o options) error {
	conn, err := amqp091.Dial(o.amqpURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	var errs []error
	for q := range strings.SplitSeq(o.queue, ",") {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			errs = append(errs, err)
		}
	}
	for x := range strings.SplitSeq(o.exchange, ",") {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "alerting-bench: "+format+"\n", args...)
}

func run(ctx context.Context, o options, mix eventmix.Mix) error {
	key := os.Getenv("CRONMESH_API_KEY")
	if key == "" {
		return errors.New("CRONMESH_API_KEY is not set")
	}
	pool, err := postgres.Connect(ctx, postgres.Options{URL: o.postgresURL, Schema: o.schema})
	if err != nil {
		return err
	}
	defer pool.Close()

	base := time.Now().UTC().Truncate(time.Second)
	logf("loading %d jobs into %s.jobs", o.jobs, o.schema)
	loadStart := time.Now()
	if err := loadJobs(ctx, pool.Acquire, o, base); err != nil {
		return fmt.Errorf("load jobs: %w", err)
	}
	loadTook := time.Since(loadStart)

	var notified atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		notified.Add(1)
	}))
	defer sink.Close()
	if err := createRules(ctx, o.apiURL, key, sink.URL); err != nil {
		return fmt.Errorf("create rules: %w", err)
	}

	conn, err := amqp091.Dial(o.amqpURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	sampleCh, err := conn.Channel()
	if err != nil {
		return err
	}

	before := metrics(o.apiURL)
	sampler := procstat.New()
	tracked := map[string]int{"alerting-bench (publisher, sink)": os.Getpid()}
	if o.alertingPID != 0 {
		tracked["alerting"] = o.alertingPID
	}
	procBefore := sampler.Snapshot(tracked)
	load0 := procstat.LoadAverage()
	logf("publishing %d events/s in messages of %d for %s", o.rate, o.batch, o.duration)
	var samples []sample
	start := time.Now()
	pubDone := make(chan pubResult, 1)
	pubCtx, stopPub := context.WithTimeout(ctx, o.duration)
	defer stopPub()
	go func() { pubDone <- publish(pubCtx, conn, o, mix, base) }()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var pub pubResult
	published := false
	var drainedAt time.Time
	deadline := start.Add(o.duration + o.drain)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case pub = <-pubDone:
			published = true
			logf("published %d events in %d messages (%v)", pub.events, pub.messages, pub.err)
			continue
		case <-tick.C:
		}
		q, _ := sampleCh.QueueDeclarePassive(o.queue, true, false, false, false, amqp091.Table{"x-queue-type": "quorum"})
		m := metrics(o.apiURL)
		samples = append(samples, sample{at: time.Since(start), depth: q.Messages, events: m["alerting_execution_events_total"] - before["alerting_execution_events_total"], checked: m["alerting_watchdog_checked_total"] - before["alerting_watchdog_checked_total"]})
		if published {
			done := m["alerting_execution_events_total"]-before["alerting_execution_events_total"] >= float64(pub.events) && q.Messages == 0
			if done {
				drainedAt = time.Now()
				break
			}
			if time.Now().After(deadline) {
				break
			}
		}
	}
	procAfter := sampler.Snapshot(tracked)
	load1 := procstat.LoadAverage()
	after := metrics(o.apiURL)
	return report(o, mix, reportData{
		base: base, loadTook: loadTook, start: start, pub: pub, drainedAt: drainedAt, samples: samples,
		before: before, after: after, usage: procstat.Between(procBefore, procAfter), end: procAfter, groups: slices.Sorted(maps.Keys(tracked)),
		machine: machine.Describe(ctx, pool, conn), load0: load0, load1: load1,
		notified: notified.Load(),
	})
}

// loadJobs writes the jobs with COPY: every job on a period interval with
// an anchor spread evenly over one period, its next slot computed by
// libs/jobspec as the service would.
func loadJobs(ctx context.Context, acquire func(context.Context) (*pgxpool.Conn, error), o options, base time.Time) error {
	c, err := acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	rows := make([][]any, 0, o.jobs)
	for i := range o.jobs {
		anchor := anchorOf(base, o, i)
		spec := &registryv1.Schedule{Kind: &registryv1.Schedule_Interval{Interval: &registryv1.Interval{
			Every: durationpb.New(o.period), AnchorTime: timestamppb.New(anchor),
		}}}
		sched, errs := jobspec.Schedule(spec, base)
		if len(errs) > 0 {
			return fmt.Errorf("schedule: %v", errs[0])
		}
		next, _ := sched.Next(base)
		b, err := proto.Marshal(spec)
		if err != nil {
			return err
		}
		rows = append(rows, []any{jobID(i), "bench", fmt.Sprintf("bench job %d", i), []byte(`{"bench":"alerting"}`), int64(1), b, base, next, next})
	}
	_, err = c.Conn().CopyFrom(ctx, pgx.Identifier{"jobs"},
		[]string{"id", "namespace", "display_name", "labels", "version", "schedule", "create_time", "next_slot", "check_time"},
		pgx.CopyFromRows(rows))
	if err != nil {
		return err
	}
	_, err = c.Exec(ctx, "ANALYZE jobs")
	return err
}

func jobID(i int) string { return fmt.Sprintf("bench-job-%06d", i) }

func anchorOf(base time.Time, o options, i int) time.Time {
	step := o.period / time.Duration(o.jobs)
	return base.Add(time.Duration(i) * step).Truncate(time.Microsecond)
}

func createRules(ctx context.Context, apiURL, key, sinkURL string) error {
	c := alertingv1connect.NewAlertServiceClient(http.DefaultClient, apiURL, connect.WithInterceptors(connect.UnaryInterceptorFunc(
		func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Authorization", "Bearer "+key)
				return next(ctx, req)
			}
		})))
	ch, err := c.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: &alertingv1.Channel{
		DisplayName: "bench sink",
		Kind:        &alertingv1.Channel_Webhook{Webhook: &alertingv1.WebhookChannel{Url: sinkURL, SigningSecret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}},
	}}))
	if err != nil {
		return err
	}
	sel := &alertingv1.JobSelector{Labels: map[string]string{"bench": "alerting"}}
	for _, r := range []*alertingv1.Rule{
		{DisplayName: "3 failures", Condition: &alertingv1.Rule_ConsecutiveFailures{ConsecutiveFailures: &alertingv1.ConsecutiveFailures{Count: 3}}},
		{DisplayName: "missed", Condition: &alertingv1.Rule_MissedSchedule{MissedSchedule: &alertingv1.MissedSchedule{Tolerance: durationpb.New(30 * time.Second)}}},
		{DisplayName: "dead", Condition: &alertingv1.Rule_DeadLettered{DeadLettered: &alertingv1.DeadLettered{}}},
	} {
		r.Selector, r.ChannelIds = sel, []string{ch.Msg.Channel.Id}
		if _, err := c.CreateRule(ctx, connect.NewRequest(&alertingv1.CreateRuleRequest{Rule: r})); err != nil {
			return err
		}
	}
	return nil
}

// slotPeriod is the jobs' interval at which their slots come due as fast
// as rate events/s of mix publish them, so that every slot's events go
// out once: jobs × (1 + slow share) / rate.
func slotPeriod(jobs, rate int, mix eventmix.Mix) time.Duration {
	return time.Duration(float64(jobs) * (1 + mix.SlowShare) / float64(rate) * float64(time.Second))
}

// slotsPerMessage is how many slots' events make a message of about
// batch events in mix (batch/2 in the mix before ADR 0021).
func slotsPerMessage(batch int, mix eventmix.Mix) int {
	return max(1, int(math.Round(float64(batch)/(1+mix.SlowShare))))
}

// slotEvents is the events of the n-th slot published (from 0), job i's
// slot at slot, as the dispatcher emits them for an attempt that ends at
// now: one in o.failEvery a FAILED without retry, the others SUCCEEDED,
// preceded by a STARTED when mix makes the attempt slow.
func slotEvents(o options, mix eventmix.Mix, n, i int, slot, now time.Time) []*eventsv1.ExecutionEvent {
	slow := mix.Slow(n)
	took := eventmix.QuickDuration
	if slow {
		took = eventmix.SlowDuration
	}
	start := now.Add(-took)
	if start.Before(slot) {
		start = slot
	}
	a := eventmix.Attempt{
		Request: &dispatchv1.DispatchRequest{
			ExecutionId: fmt.Sprintf("%s/%d", jobID(i), slot.UnixMicro()), JobId: jobID(i), Namespace: "bench", Attempt: 1,
			NominalTime: timestamppb.New(slot), FireTime: timestamppb.New(slot),
			TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED, JobDisplayName: "bench", JobLabels: map[string]string{"bench": "alerting"},
		},
		Start: start, Duration: now.Sub(start),
		Outcome: eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED, Status: 200, Excerpt: `{"status":"ok"}`,
		Trace: eventmix.NewTrace(),
	}
	if o.failEvery > 0 && (n+1)%o.failEvery == 0 {
		a.Outcome, a.Status, a.Excerpt, a.Reason = eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED, 500, `{"error":"internal"}`, "HTTP 500"
	}
	return eventmix.Events(a, slow)
}

type pubResult struct {
	events, messages int
	slots, slowSlots int           // slots published, and those of them with a slow attempt
	behind           time.Duration // the most the publisher fell behind its schedule
	err              error
}

// publish sends rate events/s as messages of about batch events: the
// events of the jobs' slots in round-robin order (each job's latest slot
// at or before now), slotsPerMessage slots a message, at the slot rate
// that makes rate events/s in mix.
func publish(ctx context.Context, conn *amqp091.Connection, o options, mix eventmix.Mix, base time.Time) pubResult {
	var res pubResult
	ch, err := conn.Channel()
	if err != nil {
		return pubResult{err: err}
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return pubResult{err: err}
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 10000))
	perMessage := slotsPerMessage(o.batch, mix)
	slotsPerSec := float64(o.rate) / (1 + mix.SlowShare)
	interval := time.Duration(float64(perMessage) / slotsPerSec * float64(time.Second))
	start := time.Now()
	next := 0 // round-robin job index
	outstanding := 0
	for n := 0; ; n++ {
		due := start.Add(time.Duration(n) * interval)
		if wait := time.Until(due); wait > 0 {
			select {
			case <-ctx.Done():
				goto out
			case <-time.After(wait):
			}
		} else if ctx.Err() != nil {
			goto out
		} else {
			res.behind = max(res.behind, -wait)
		}
		now := time.Now()
		events := make([]*eventsv1.ExecutionEvent, 0, o.batch+2)
		for taken := 0; taken < perMessage; {
			i := next
			next = (next + 1) % o.jobs
			anchor := anchorOf(base, o, i)
			if anchor.After(now) {
				continue // its first slot has not come yet
			}
			slot := anchor.Add(now.Sub(anchor) / o.period * o.period)
			if mix.Slow(res.slots) {
				res.slowSlots++
			}
			events = append(events, slotEvents(o, mix, res.slots, i, slot, now)...)
			res.slots++
			taken++
		}
		body, err := proto.Marshal(&eventsv1.ExecutionEventBatch{Events: events})
		if err != nil {
			res.err = err
			break
		}
		if err := ch.PublishWithContext(context.Background(), o.exchange, execevent.RoutingKey(events), false, false,
			amqp091.Publishing{ContentType: "application/x-protobuf", DeliveryMode: amqp091.Persistent, Body: body}); err != nil {
			res.err = err
			break
		}
		outstanding++
		res.messages++
		res.events += len(events)
		for drained := false; !drained; {
			select {
			case c := <-confirms:
				outstanding--
				if !c.Ack {
					res.err = errors.New("the broker nacked a message")
				}
			default:
				drained = true
			}
		}
	}
out:
	for outstanding > 0 {
		select {
		case c := <-confirms:
			outstanding--
			if !c.Ack {
				res.err = errors.New("the broker nacked a message")
			}
		case <-time.After(30 * time.Second):
			res.err = fmt.Errorf("%d publishes not confirmed", outstanding)
			return res
		}
	}
	return res
}

type sample struct {
	at      time.Duration
	depth   int
	events  float64
	checked float64
}

// metrics scrapes the service's /metrics into name -> value (histogram
// buckets keep their le label in the name); failures give an empty map.
func metrics(apiURL string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get(apiURL + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "alerting_") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		if i := strings.IndexByte(name, '{'); i >= 0 {
			labels := name[i:]
			name = name[:i]
			if le := between(labels, `le="`, `"`); le != "" {
				name += "|" + le
			}
		}
		out[name] += v
	}
	return out
}

func between(s, a, b string) string {
	i := strings.Index(s, a)
	if i < 0 {
		return ""
	}
	s = s[i+len(a):]
	j := strings.Index(s, b)
	if j < 0 {
		return ""
	}
	return s[:j]
}

// quantile estimates a quantile of the lag histogram's increase between
// two scrapes (linear within a bucket, as Prometheus does).
func quantile(before, after map[string]float64, q float64) float64 {
	const prefix = "alerting_evaluation_lag_seconds_bucket|"
	type bucket struct{ le, n float64 }
	var bs []bucket
	for k, v := range after {
		if le, ok := strings.CutPrefix(k, prefix); ok {
			f, err := strconv.ParseFloat(le, 64)
			if le == "+Inf" {
				f, err = math.Inf(1), nil
			}
			if err == nil {
				bs = append(bs, bucket{f, v - before[k]})
			}
		}
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	if len(bs) == 0 || bs[len(bs)-1].n == 0 {
		return math.NaN()
	}
	rank := q * bs[len(bs)-1].n
	prevLe, prevN := 0.0, 0.0
	for _, b := range bs {
		if b.n >= rank {
			if math.IsInf(b.le, 1) {
				return prevLe
			}
			return prevLe + (b.le-prevLe)*(rank-prevN)/math.Max(b.n-prevN, 1e-9)
		}
		prevLe, prevN = b.le, b.n
	}
	return prevLe
}

type reportData struct {
	base, start, drainedAt time.Time
	loadTook               time.Duration
	pub                    pubResult
	samples                []sample
	before, after          map[string]float64
	usage                  procstat.Usage
	end                    procstat.Snapshot
	groups                 []string
	machine                machine.Machine
	load0, load1           string
	notified               int64
}

func report(o options, mix eventmix.Mix, d reportData) error {
	w := io.Writer(os.Stdout)
	if o.out != "" {
		f, err := os.Create(o.out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	processed := d.after["alerting_execution_events_total"] - d.before["alerting_execution_events_total"]
	// The steady window: the publishing duration (samples up to it).
	var maxDepth int
	var atEnd sample
	for _, s := range d.samples {
		if s.at <= o.duration+time.Second {
			maxDepth = max(maxDepth, s.depth)
			atEnd = s
		}
	}
	kept := "no: the queue had not drained within --drain"
	if !d.drainedAt.IsZero() {
		kept = fmt.Sprintf("drained %.1f s after publishing stopped", d.drainedAt.Sub(d.start.Add(o.duration)).Seconds())
	}
	fmt.Fprintf(w, "# Alerting: rule evaluation at %d events/s with %d jobs watched\n\n", o.rate, o.jobs)
	fmt.Fprintf(w, "Run at %s by `%s`.\n\n", d.start.UTC().Format(time.RFC3339), strings.Join(os.Args, " "))
	fmt.Fprintf(w, "## Machine\n\n%s\n", d.machine.Markdown())
	fmt.Fprintf(w, "## Setup\n\n%d jobs loaded into the jobs table in %.1f s, each on a %s interval with anchors spread evenly (%.0f slots due per second), all watched by the watchdog; 3 rules match every job (3 consecutive failures, missed schedule with 30 s tolerance, dead-lettered), notifying a webhook sink in the bench process. Each slot's attempt emits its events as the dispatcher does: %s. 1 outcome in %d is a FAILED without retry (0 meaning none), the rest SUCCEEDED. Each message holds the events of %d slots (about %d events), routed by its first event's kind, published with confirms on one channel.\n\n",
		o.jobs, d.loadTook.Seconds(), o.period, float64(o.jobs)/o.period.Seconds(), mix.Describe(), o.failEvery, slotsPerMessage(o.batch, mix), o.batch)
	fmt.Fprintf(w, "Events/s compares across reports only under the same mix: the service evaluates every event, and a slot is two events in the mix before ADR 0021 but mostly one in production's. Slots/s is the figure that compares across mixes.\n\n")
	fmt.Fprintf(w, "## Result\n\n| measure | value |\n| --- | --- |\n")
	fmt.Fprintf(w, "| events published | %d in %d messages over %s (%.0f events/s); publisher at most %s behind its schedule; error: %v |\n",
		d.pub.events, d.pub.messages, o.duration, float64(d.pub.events)/o.duration.Seconds(), d.pub.behind.Round(time.Millisecond), d.pub.err)
	fmt.Fprintf(w, "| slots (executions) published | %d over %s (%.0f slots/s), %d of them slow (a STARTED and an outcome) |\n",
		d.pub.slots, o.duration, float64(d.pub.slots)/o.duration.Seconds(), d.pub.slowSlots)
	fmt.Fprintf(w, "| events evaluated during publishing | %.0f (%.0f events/s) |\n", atEnd.events, atEnd.events/math.Max(atEnd.at.Seconds(), 1))
	fmt.Fprintf(w, "| events evaluated in all | %.0f |\n", processed)
	fmt.Fprintf(w, "| queue depth (ready messages) | max %d during publishing, %d at its end |\n", maxDepth, atEnd.depth)
	fmt.Fprintf(w, "| kept up | %s |\n", kept)
	fmt.Fprintf(w, "| lag, publish to commit (histogram estimate) | p50 %.3f s, p99 %.3f s |\n", quantile(d.before, d.after, .5), quantile(d.before, d.after, .99))
	fmt.Fprintf(w, "| watchdog | %.0f slots checked, %.0f with no event within tolerance, %.0f incidents opened |\n",
		d.after["alerting_watchdog_checked_total"]-d.before["alerting_watchdog_checked_total"],
		d.after["alerting_watchdog_missed_total"]-d.before["alerting_watchdog_missed_total"],
		d.after["alerting_watchdog_incidents_opened_total"]-d.before["alerting_watchdog_incidents_opened_total"])
	fmt.Fprintf(w, "| incidents from events | %.0f opened, %.0f resolved; %d notifications received by the sink |\n",
		d.after["alerting_incidents_opened_total"]-d.before["alerting_incidents_opened_total"],
		d.after["alerting_incidents_resolved_total"]-d.before["alerting_incidents_resolved_total"], d.notified)
	fmt.Fprintf(w, "\n## Load on the machine\n\n/proc/loadavg before: `%s`; after: `%s`.\n\n", d.load0, d.load1)
	var cpu benchreport.Doc
	cpu.Usage(d.usage, append(d.groups, procstat.Postgres, procstat.RabbitMQ), &d.end)
	if _, err := cpu.WriteTo(w); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n## Samples (every second)\n\n| t | ready messages | events evaluated | watchdog checks |\n| --- | --- | --- | --- |\n")
	for _, s := range d.samples {
		fmt.Fprintf(w, "| %.0f s | %d | %.0f | %.0f |\n", s.at.Seconds(), s.depth, s.events, s.checked)
	}
	return nil
}
