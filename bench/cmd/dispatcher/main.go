// Command dispatcher-bench measures the dispatcher (deploy/local/
// bench-dispatcher.sh runs it): it starts a dispatcher binary on a spare
// port with its own schema and broker names, serves a loopback HTTP target
// itself, publishes DispatchRequests straight to the dispatch exchange and
// appends a Markdown report.
//
// Scenarios:
//
//	throughput  N requests (default 100,000) are queued first, then the
//	            dispatcher is started; deliveries/s is N over the time from
//	            the first request reaching the target to the last.
//	latency     requests published at a steady rate (default 1,000/s for
//	            60 s) to an idle, running dispatcher; for each, the time from
//	            just before its publish to its arrival at the target (the
//	            publish time travels in the request body). That includes the
//	            broker's routing and queueing before the message leaves the
//	            queue, so it is an upper bound of "message leaving the queue
//	            to the request reaching the target". The issue's own measure
//	            is estimated with a probe: a second quorum queue bound beside
//	            the dispatch queue receives a copy of every request, and a
//	            consumer in this process stamps each copy's arrival; arrival
//	            at the target minus arrival at the probe is the time from
//	            the message leaving the queue to the request reaching the
//	            target.
//
// Before either, in the same run, it measures the machine's ceilings
// (bench/internal/ceiling: RabbitMQ publish+consume with confirms of messages the
// size of its requests, batched PostgreSQL inserts) and reports its rate
// as a share of each, so that runs on hosts of different speed compare.
//
// The lifecycle events go where they go in a mesh: --event-queues quorum
// queues (default 2, history's and alerting's) are bound to the executions
// exchange and drained by consumers in this process. Without them the
// events would be unroutable and the broker would confirm them at once,
// which flatters the dispatcher (its acks wait for those confirms).
//
// Every name it creates carries --tag; it removes them at the end.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cronmesh/cronmesh/bench/internal/ceiling"
	"github.com/cronmesh/cronmesh/bench/internal/machine"
	"github.com/cronmesh/cronmesh/bench/internal/pprofsave"
	"github.com/cronmesh/cronmesh/bench/internal/procstat"
	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/promhist"
	"github.com/cronmesh/cronmesh/libs/testkit/freeport"
)

type options struct {
	scenario       string
	dispatcher     string
	dispatcherArgs string
	postgresURL    string
	amqpURL        string
	tag            string
	out            string
	n              int
	pack           int
	rate           int
	duration       time.Duration
	logDir         string
	profile        string
	eventQueues    int
	ceiling        time.Duration
}

func main() {
	var o options
	fs := flag.NewFlagSet("dispatcher-bench", flag.ExitOnError)
	fs.StringVar(&o.scenario, "scenario", "throughput", "throughput or latency")
	fs.StringVar(&o.dispatcher, "dispatcher", "bin/dispatcher", "the dispatcher binary")
	fs.StringVar(&o.dispatcherArgs, "dispatcher-args", "", "extra dispatcher flags, space-separated (tuning)")
	fs.StringVar(&o.postgresURL, "postgres-url", cmp.Or(os.Getenv("CRONMESH_POSTGRES_URL"), "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "PostgreSQL")
	fs.StringVar(&o.amqpURL, "amqp-url", cmp.Or(os.Getenv("CRONMESH_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ")
	fs.StringVar(&o.tag, "tag", fmt.Sprintf("b%d", os.Getpid()), "prefix of every schema and broker name of the run")
	fs.StringVar(&o.out, "out", "", "Markdown report to append to (default stdout)")
	fs.IntVar(&o.n, "n", 100_000, "throughput: requests")
	fs.IntVar(&o.pack, "pack", 64, "throughput: requests per broker message, packed as the trigger's relay packs a burst (broker.Pack; 1: one request a message)")
	fs.IntVar(&o.rate, "rate", 1000, "latency: requests per second")
	fs.DurationVar(&o.duration, "duration", time.Minute, "latency: how long")
	fs.StringVar(&o.logDir, "log-dir", os.TempDir(), "where the dispatcher's log goes")
	fs.StringVar(&o.profile, "profile", "", "throughput: save a 10 s CPU profile of the dispatcher here (starts it with --pprof)")
	fs.IntVar(&o.eventQueues, "event-queues", 2, "quorum queues bound to the executions exchange and drained here, as history and alerting do (0: events are unroutable)")
	fs.DurationVar(&o.ceiling, "ceiling-duration", 15*time.Second, "how long each machine ceiling is measured before the scenario (negative: skip)")
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := run(ctx, o, strings.Join(os.Args, " "))
	if report != "" {
		if o.out == "" {
			fmt.Print(report)
		} else if f, ferr := os.OpenFile(o.out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); ferr == nil {
			_, _ = f.WriteString(report)
			_ = f.Close()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dispatcher-bench:", err)
		os.Exit(1)
	}
}

// env is one run's names, target and dispatcher.
type env struct {
	o        options
	schema   string
	names    map[string]string
	db       *pgxpool.Pool
	conn     *amqp091.Connection
	target   *target
	dispatch *exec.Cmd
	dispLog  string
	addr     string
	procs    *procstat.Sampler
}

func run(ctx context.Context, o options, cmdline string) (string, error) {
	e := &env{o: o, schema: o.tag + "_dispatcher", names: map[string]string{}, procs: procstat.New()}
	for _, n := range []string{"dispatch", "dispatchq", "retry", "retryq", "dead", "deadq", "executions"} {
		// Under cronmesh.: the dispatcher refuses names a namespace's
		// AMQP targets could reach ("<tag>." would be namespace <tag>'s).
		e.names[n] = "cronmesh." + o.tag + "." + n
	}
	var err error
	if e.db, err = pgxpool.New(ctx, o.postgresURL); err != nil {
		return "", err
	}
	defer e.db.Close()
	if e.conn, err = amqp091.Dial(o.amqpURL); err != nil {
		return "", err
	}
	defer e.conn.Close()
	defer e.cleanup()
	if _, err := e.db.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+e.schema); err != nil {
		return "", err
	}
	if e.target, err = newTarget(); err != nil {
		return "", err
	}
	defer e.target.close()
	// The dispatch queues exist before the dispatcher, so the throughput
	// scenario can queue its requests first.
	if err := broker.DeclareQueues(ctx, o.amqpURL, broker.DispatchQueues(e.names["dispatch"], e.names["dispatchq"])...); err != nil {
		return "", err
	}
	if err := e.drainEvents(ctx); err != nil {
		return "", err
	}
	m := machine.Describe(ctx, e.db, e.conn)
	scenario := map[string]func(context.Context) (string, float64, error){"throughput": e.throughput, "latency": e.latency}[o.scenario]
	if scenario == nil {
		return "", fmt.Errorf("unknown scenario %q", o.scenario)
	}
	ceilings := e.measureCeilings(ctx)
	before := sampleLoad()
	body, rate, err := scenario(ctx)
	after := sampleLoad()
	var b strings.Builder
	fmt.Fprintf(&b, "\n## dispatcher %s — %s\n\n", o.scenario, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "Command: `%s`\n\n", cmdline)
	b.WriteString(m.Markdown())
	fmt.Fprintf(&b, "\nLoad before: %s\n\nLoad after: %s\n\n", before, after)
	b.WriteString(body)
	b.WriteString("\n### Machine ceiling (measured in this run, before the dispatcher started)\n")
	b.WriteString(ceilings.Markdown(rate, "deliveries/s", "A delivery costs the broker at least one such message (its dispatch request) plus its share of the event batches, and PostgreSQL its completion row, on the same two cores as the dispatcher, this process and its target: the ratios are upper bounds of what is left."))
	return b.String(), err
}

// measureCeilings measures the machine's ceilings with messages the size
// of this run's requests, before the scenario starts anything of its own.
func (e *env) measureCeilings(ctx context.Context) ceiling.Machine {
	size := proto.Size(benchRequest(uuid.Must(uuid.NewV7()).String(), e.target.url, benchSecret, 0, stamp(0, time.Now())))
	return ceiling.Measure(ctx, ceiling.Options{AMQPURL: e.o.amqpURL, Pool: e.db, Name: e.o.tag, MessageSize: size, Duration: e.o.ceiling})
}

// sampleLoad is the load average, for the report.
func sampleLoad() string { return "load average `" + procstat.LoadAverage() + "`" }

// tracked is the dispatcher's pid (once started) and this process's.
func (e *env) tracked() map[string]int {
	out := map[string]int{"dispatcher-bench": os.Getpid()}
	if e.dispatch != nil && e.dispatch.Process != nil {
		out["dispatcher"] = e.dispatch.Process.Pid
	}
	return out
}

// busySince is how busy the machine was since the snapshot from (whoever
// used it), with what ran beside the benchmark.
func (e *env) busySince(from procstat.Snapshot) string {
	u := procstat.Between(from, e.procs.Snapshot(e.tracked()))
	if u.Err != nil || u.Wall <= 0 {
		return "n/a"
	}
	out := fmt.Sprintf("%.0f %% of %d cores (dispatcher %.2f cores, PostgreSQL %.2f, RabbitMQ %.2f, this process %.2f, others %.2f)",
		100*u.Of(u.Busy)/float64(u.Cores), u.Cores, u.Of(u.CPU["dispatcher"]), u.Of(u.CPU[procstat.Postgres]), u.Of(u.CPU[procstat.RabbitMQ]),
		u.Of(u.CPU["dispatcher-bench"]), u.Of(u.CPU[procstat.Other]))
	if len(u.TopOther) > 0 {
		out += "; others: " + strings.Join(u.TopOther, ", ")
	}
	return out
}

// eventQueues are the names of the --event-queues queues.
func (e *env) eventQueues() []string {
	names := make([]string, e.o.eventQueues)
	for i := range names {
		names[i] = fmt.Sprintf("%s.events%d", e.o.tag, i+1)
	}
	return names
}

// drainEvents declares the event queues and consumes them until ctx ends,
// acknowledging every message, as history and alerting do.
func (e *env) drainEvents(ctx context.Context) error {
	for _, q := range e.eventQueues() {
		if err := broker.DeclareQueues(ctx, e.o.amqpURL, broker.QueueBinding{Exchange: e.names["executions"], Queue: q, BindingKey: "#"}); err != nil {
			return err
		}
		ch, err := e.conn.Channel()
		if err != nil {
			return err
		}
		if err := ch.Qos(100, 0, false); err != nil {
			return err
		}
		deliveries, err := ch.ConsumeWithContext(ctx, q, "", false, false, false, false, nil)
		if err != nil {
			return err
		}
		go func() {
			for d := range deliveries {
				_ = d.Ack(false)
			}
		}()
	}
	return nil
}

// startDispatcher runs the dispatcher and waits until it is ready.
func (e *env) startDispatcher(ctx context.Context) error {
	addr, err := freeport.Addr()
	if err != nil {
		return err
	}
	e.addr = addr
	args := []string{
		"--listen", addr, "--postgres-url", e.o.postgresURL, "--amqp-url", e.o.amqpURL, "--schema", e.schema,
		"--api-keys", "bench=bench-key-0123456789abcdef", "--rate-limit", "off", "--registry-url", "", "--log-level", "warn",
		"--dispatch-exchange", e.names["dispatch"], "--dispatch-queue", e.names["dispatchq"],
		"--retry-exchange", e.names["retry"], "--retry-queue", e.names["retryq"], "--retry-tiers", "1s",
		"--dead-exchange", e.names["dead"], "--dead-queue", e.names["deadq"],
		"--executions-exchange", e.names["executions"], "--allow-networks", "127.0.0.0/8",
	}
	args = append(args, strings.Fields(e.o.dispatcherArgs)...)
	if e.o.profile != "" {
		args = append(args, "--pprof")
	}
	e.dispLog = filepath.Join(e.o.logDir, e.o.tag+"-dispatcher.log")
	logFile, err := os.Create(e.dispLog)
	if err != nil {
		return err
	}
	e.dispatch = exec.Command(e.o.dispatcher, args...)
	e.dispatch.Stdout, e.dispatch.Stderr = logFile, logFile
	if err := e.dispatch.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return errors.New("the dispatcher did not become ready (see " + e.dispLog + ")")
}

func (e *env) cleanup() {
	if e.dispatch != nil && e.dispatch.Process != nil {
		_ = e.dispatch.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = e.dispatch.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = e.dispatch.Process.Kill()
		}
	}
	if ch, err := e.conn.Channel(); err == nil {
		for _, b := range broker.DispatchQueues(e.names["dispatch"], e.names["dispatchq"]) {
			_, _ = ch.QueueDelete(b.Queue, false, false, false)
		}
		for _, b := range broker.RetryTiers(e.names["retry"], e.names["retryq"], e.names["dispatch"], []time.Duration{time.Second}) {
			_, _ = ch.QueueDelete(b.Queue, false, false, false)
		}
		_, _ = ch.QueueDelete(e.names["deadq"], false, false, false)
		_, _ = ch.QueueDelete(e.probeQueue(), false, false, false)
		for _, q := range e.eventQueues() {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		for _, x := range []string{"dispatch", "retry", "dead", "executions"} {
			_ = ch.ExchangeDelete(e.names[x], false, false)
		}
		_ = ch.Close()
	}
	_, _ = e.db.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+e.schema+` CASCADE`)
}

// target is the loopback HTTP target: it records, per request, the
// arrival time and the publish time carried in the body.
type target struct {
	srv *http.Server
	url string
	mu  sync.Mutex
	// arrivals and latencies in arrival order.
	arrivals  []time.Time
	latencies []time.Duration
	// byRequest is the arrival of each stamped request by its index.
	byRequest map[int]time.Time
}

func newTarget() (*target, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &target{url: "http://" + l.Addr().String() + "/hook", byRequest: map[int]time.Time{}}
	t.srv = &http.Server{Handler: t, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = t.srv.Serve(l) }()
	return t, nil
}

func (t *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	body, _ := io.ReadAll(r.Body)
	i, sent, stamped := parseStamp(string(body))
	t.mu.Lock()
	t.arrivals = append(t.arrivals, now)
	if stamped {
		t.latencies = append(t.latencies, now.Sub(sent))
		t.byRequest[i] = now
	}
	t.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (t *target) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.arrivals)
}

func (t *target) close() { _ = t.srv.Close() }

// publisher publishes requests with confirms, pipelined.
type publisher struct {
	ch       *amqp091.Channel
	exchange string
	jobID    string
	secret   string
	url      string
	confirms chan amqp091.Confirmation
	nacked   int
	acked    int
	wg       sync.WaitGroup
}

func (e *env) newPublisher() (*publisher, error) {
	ch, err := e.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		return nil, err
	}
	p := &publisher{ch: ch, exchange: e.names["dispatch"], jobID: uuid.Must(uuid.NewV7()).String(),
		secret: benchSecret, url: e.target.url,
		confirms: ch.NotifyPublish(make(chan amqp091.Confirmation, 100_000))}
	p.wg.Go(func() {
		for c := range p.confirms {
			if c.Ack {
				p.acked++
			} else {
				p.nacked++
			}
		}
	})
	return p, nil
}

// stamp is the body of a stamped request: its index and publish time.
func stamp(i int, sent time.Time) string { return fmt.Sprintf("%d %d", i, sent.UnixNano()) }

// parseStamp reverses stamp; ok is false for an unstamped body.
func parseStamp(body string) (i int, sent time.Time, ok bool) {
	index, nanos, found := strings.Cut(strings.TrimSpace(body), " ")
	if !found {
		return 0, time.Time{}, false
	}
	i, err1 := strconv.Atoi(index)
	n, err2 := strconv.ParseInt(nanos, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, time.Time{}, false
	}
	return i, time.Unix(0, n), true
}

// benchSecret signs every request of the bench's one job.
const benchSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// benchRequest is request i of job jobID: a POST of body to url, signed
// with secret, never retried.
func benchRequest(jobID, url, secret string, i int, body string) *dispatchv1.DispatchRequest {
	nominal := time.Unix(1_700_000_000+int64(i), 0)
	return &dispatchv1.DispatchRequest{
		ExecutionId: execid.For(jobID, nominal), JobId: jobID, Namespace: "bench", Attempt: 1,
		NominalTime: timestamppb.New(nominal), FireTime: timestamppb.Now(),
		TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED,
		Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Method: "POST", Url: url, Body: body, SigningSecret: secret, Timeout: durationpb.New(10 * time.Second),
		}}},
		RetryPolicy: &registryv1.RetryPolicy{MaxRetries: proto.Int32(0)},
		Priority:    registryv1.Priority_PRIORITY_NORMAL,
	}
}

// publish sends request i; stamped puts its index and publish time in the
// body.
func (p *publisher) publish(ctx context.Context, i int, stamped bool) error {
	return p.publishPacked(ctx, i, 1, stamped)
}

// publishPacked sends requests first to first+n-1, in one message packed
// by broker.Pack as the trigger's relay packs a burst when n > 1.
func (p *publisher) publishPacked(ctx context.Context, first, n int, stamped bool) error {
	msgs := make([]*message.Message, n)
	for k := range n {
		i := first + k
		body := ""
		if stamped {
			body = stamp(i, time.Now())
		}
		req := benchRequest(p.jobID, p.url, p.secret, i, body)
		b, err := proto.Marshal(req)
		if err != nil {
			return err
		}
		msgs[k] = message.NewMessage(req.ExecutionId, b)
	}
	msg := msgs[0]
	if n > 1 {
		var err error
		if msg, err = broker.Pack(msgs); err != nil {
			return err
		}
	}
	pub, err := broker.Marshaler{}.Marshal(msg)
	if err != nil {
		return err
	}
	return p.ch.PublishWithContext(ctx, p.exchange, broker.DispatchRoutingKey("normal"), false, false, pub)
}

func (p *publisher) close() {
	_ = p.ch.Close()
	p.wg.Wait()
}

func (e *env) throughput(ctx context.Context) (string, float64, error) {
	p, err := e.newPublisher()
	if err != nil {
		return "", 0, err
	}
	pack := max(e.o.pack, 1)
	messages := 0
	start := time.Now()
	for i := 0; i < e.o.n; i += pack {
		if err := p.publishPacked(ctx, i, min(pack, e.o.n-i), false); err != nil {
			return "", 0, err
		}
		messages++
		if messages%10_000 == 0 {
			// Keep the unconfirmed window bounded.
			for p.acked+p.nacked < messages-20_000 {
				time.Sleep(time.Millisecond)
			}
		}
	}
	for p.acked+p.nacked < messages && time.Since(start) < 5*time.Minute {
		time.Sleep(10 * time.Millisecond)
	}
	queued := time.Since(start)
	p.close()
	s0 := e.procs.Snapshot(e.tracked())
	if err := e.startDispatcher(ctx); err != nil {
		return "", 0, err
	}
	if e.o.profile != "" {
		go e.saveProfile(ctx)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for e.target.count() < e.o.n && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	e.target.mu.Lock()
	arr := append([]time.Time(nil), e.target.arrivals...)
	e.target.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests queued in %d broker messages (up to %d a message) in %s (confirmed: %d, nacked: %d) before the dispatcher started.\n\n",
		e.o.n, messages, pack, queued.Round(time.Millisecond), p.acked, p.nacked)
	if len(arr) < 2 {
		return b.String(), 0, fmt.Errorf("only %d requests reached the target", len(arr))
	}
	span := arr[len(arr)-1].Sub(arr[0])
	rate := float64(len(arr)-1) / span.Seconds()
	fmt.Fprintf(&b, "| measured | value |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| requests at the target | %d of %d |\n", len(arr), e.o.n)
	fmt.Fprintf(&b, "| first to last arrival | %s |\n", span.Round(time.Millisecond))
	fmt.Fprintf(&b, "| deliveries/s | **%.0f** (target ≥ 5,000: %s) |\n", rate, verdict(rate >= 5000))
	// Steadiness: the rate per 10 % of the run.
	var parts []string
	for k := range 10 {
		lo, hi := k*len(arr)/10, (k+1)*len(arr)/10-1
		if hi > lo {
			parts = append(parts, fmt.Sprintf("%.0f", float64(hi-lo)/arr[hi].Sub(arr[lo]).Seconds()))
		}
	}
	fmt.Fprintf(&b, "| deliveries/s per tenth of the run | %s |\n", strings.Join(parts, ", "))
	fmt.Fprintf(&b, "| dispatcher CPU (user+sys) | %s |\n", e.dispatcherCPU())
	fmt.Fprintf(&b, "| machine CPU busy from dispatcher start to last arrival (everyone: dispatcher, broker, database, this process, others) | %s |\n", e.busySince(s0))
	if len(arr) < e.o.n {
		return b.String(), rate, fmt.Errorf("%d of %d requests reached the target", len(arr), e.o.n)
	}
	return b.String(), rate, nil
}

func (e *env) latency(ctx context.Context) (string, float64, error) {
	if err := e.startDispatcher(ctx); err != nil {
		return "", 0, err
	}
	pr, err := e.startProbe(ctx)
	if err != nil {
		return "", 0, err
	}
	defer pr.close()
	p, err := e.newPublisher()
	if err != nil {
		return "", 0, err
	}
	// Warm up (connections to the target, the database pool): 1 s at the
	// rate, not measured.
	total := int(e.o.duration.Seconds()) * e.o.rate
	warm := e.o.rate
	interval := time.Second / time.Duration(e.o.rate)
	start := time.Now()
	var s0 procstat.Snapshot
	late := 0
	var delaysBefore promhist.Histogram
	for i := range warm + total {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		} else if -d > 10*time.Millisecond {
			late++
		}
		if i == warm {
			// Wait for the warm-up to arrive, then measure from a clean slate.
			for e.target.count() < warm && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			e.target.mu.Lock()
			e.target.latencies = e.target.latencies[:0]
			e.target.arrivals = e.target.arrivals[:0]
			e.target.mu.Unlock()
			s0 = e.procs.Snapshot(e.tracked())
			if delaysBefore, err = e.startDelays(ctx); err != nil {
				return "", 0, err
			}
		}
		if err := p.publish(ctx, i, true); err != nil {
			return "", 0, err
		}
	}
	elapsed := time.Since(start)
	busy := e.busySince(s0)
	deadline := time.Now().Add(time.Minute)
	for e.target.count() < total && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	p.close()
	delaysAfter, err := e.startDelays(ctx)
	if err != nil {
		return "", 0, err
	}
	e.target.mu.Lock()
	lat := slices.Clone(e.target.latencies)
	atTarget := maps.Clone(e.target.byRequest)
	e.target.mu.Unlock()
	slices.Sort(lat)
	fromQueue, unprobed, negative := pr.sinceArrival(atTarget, warm)
	var b strings.Builder
	if len(lat) == 0 {
		return "", 0, errors.New("no request reached the target")
	}
	q := func(f float64) time.Duration { return quantile(lat, f) }
	fmt.Fprintf(&b, "Measured: for each request, target arrival time minus the time just before its publish (both in this process, one clock), so it includes the publish and the broker's queueing: an upper bound of the issue's \"message leaving the queue to the request reaching the target\".\n\n")
	fmt.Fprintf(&b, "| measured | value |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| requests | %d of %d at %d/s over %s (publishing took %s; %d publishes more than 10 ms behind schedule) |\n",
		len(lat), total, e.o.rate, e.o.duration, elapsed.Round(time.Millisecond), late)
	fmt.Fprintf(&b, "| p50 | %s |\n| p90 | %s |\n| p99 | **%s** (target < 5 ms: %s) |\n| p99.9 | %s |\n| max | %s |\n",
		q(.5).Round(time.Microsecond), q(.9).Round(time.Microsecond), q(.99).Round(time.Microsecond), verdict(q(.99) < 5*time.Millisecond),
		q(.999).Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	if len(fromQueue) > 0 {
		fq := func(f float64) time.Duration { return quantile(fromQueue, f) }
		fmt.Fprintf(&b, "| the issue's measure, estimated: the message leaves the queue (its copy reaches the probe consumer) → the request reaches the target | p50 %s, p90 %s, p99 **%s** (target < 5 ms: %s), max %s; %d requests (%d whose copy reached the probe after the target: counted as 0; %d without a copy) |\n",
			fq(.5).Round(time.Microsecond), fq(.9).Round(time.Microsecond), fq(.99).Round(time.Microsecond), verdict(fq(.99) < 5*time.Millisecond),
			fromQueue[len(fromQueue)-1].Round(time.Microsecond), len(fromQueue), negative, unprobed)
	}
	share := "not exported by this dispatcher"
	if len(delaysAfter) > 0 {
		p50, n := promhist.QuantileBound(delaysBefore, delaysAfter, .5)
		p99, _ := promhist.QuantileBound(delaysBefore, delaysAfter, .99)
		share = fmt.Sprintf("p50 ≤ %s, p99 ≤ **%s** (%.0f attempts)", bound(p50), bound(p99), n)
	}
	fmt.Fprintf(&b, "| the dispatcher's own share: a worker takes the message → its attempt starts (`delivery_start_delay_seconds`, so a bucket's upper bound; the lower bound of the issue's measure) | %s |\n", share)
	fmt.Fprintf(&b, "| dispatcher CPU (user+sys) | %s |\n", e.dispatcherCPU())
	fmt.Fprintf(&b, "| machine CPU busy while measuring (everyone) | %s |\n", busy)
	return b.String(), float64(len(lat)) / elapsed.Seconds(), nil
}

// probe consumes a copy of every normal-priority dispatch request from a
// quorum queue of its own, bound to the dispatch exchange beside the
// dispatch queue, and stamps when each copy arrives. The broker routes
// both copies in one publish and both queues share the node's write-ahead
// log, so a copy's arrival is an estimate of when its twin could leave the
// dispatch queue. The consumer has its own connection (no publisher
// confirms share its socket), acknowledges automatically and stamps before
// decoding.
type probe struct {
	conn     *amqp091.Connection
	mu       sync.Mutex
	arrivals map[int]time.Time // by request index
	done     chan struct{}
}

func (e *env) probeQueue() string { return e.o.tag + ".probe" }

func (e *env) startProbe(ctx context.Context) (*probe, error) {
	binding := broker.QueueBinding{Exchange: e.names["dispatch"], Queue: e.probeQueue(), BindingKey: broker.DispatchRoutingKey("normal")}
	if err := broker.DeclareQueues(ctx, e.o.amqpURL, binding); err != nil {
		return nil, err
	}
	conn, err := amqp091.Dial(e.o.amqpURL)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, errors.Join(err, conn.Close())
	}
	deliveries, err := ch.ConsumeWithContext(ctx, e.probeQueue(), "", true, false, false, false, nil)
	if err != nil {
		return nil, errors.Join(err, conn.Close())
	}
	p := &probe{conn: conn, arrivals: map[int]time.Time{}, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for d := range deliveries {
			now := time.Now()
			var req dispatchv1.DispatchRequest
			if proto.Unmarshal(d.Body, &req) != nil {
				continue
			}
			if i, _, ok := parseStamp(req.GetTarget().GetHttp().GetBody()); ok {
				p.mu.Lock()
				p.arrivals[i] = now
				p.mu.Unlock()
			}
		}
	}()
	return p, nil
}

// sinceArrival is, sorted, the time from each request's copy reaching the
// probe to the request reaching the target (atTarget, by index), for the
// requests from index first on. A copy that arrived after its request
// counts as 0 (negative says how many); requests without a copy are
// counted in unprobed.
func (p *probe) sinceArrival(atTarget map[int]time.Time, first int) (sorted []time.Duration, unprobed, negative int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, arrived := range atTarget {
		if i < first {
			continue
		}
		left, ok := p.arrivals[i]
		if !ok {
			unprobed++
			continue
		}
		d := arrived.Sub(left)
		if d < 0 {
			negative++
			d = 0
		}
		sorted = append(sorted, d)
	}
	slices.Sort(sorted)
	return sorted, unprobed, negative
}

func (p *probe) close() {
	_ = p.conn.Close()
	<-p.done
}

// quantile is the f-quantile of sorted, which is not empty.
func quantile(sorted []time.Duration, f float64) time.Duration {
	return sorted[min(len(sorted)-1, int(f*float64(len(sorted))))]
}

// startDelays reads the dispatcher's delivery_start_delay_seconds
// histogram; empty from a dispatcher without it (an older binary).
func (e *env) startDelays(ctx context.Context) (promhist.Histogram, error) {
	return promhist.Scrape(ctx, []string{"http://" + e.addr}, "delivery_start_delay_seconds")
}

// bound renders a bucket bound in seconds as a duration.
func bound(seconds float64) string {
	if math.IsInf(seconds, 1) || math.IsNaN(seconds) {
		return "∞"
	}
	return time.Duration(seconds * float64(time.Second)).String()
}

// saveProfile saves a 10 s CPU profile of the dispatcher to o.profile.
func (e *env) saveProfile(ctx context.Context) {
	if err := pprofsave.Save(ctx, "http://"+e.addr+"/debug/pprof/profile?seconds=10", e.o.profile, 40*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
	}
}

// cpuSeconds is the dispatcher's CPU time so far, from /proc; -1 when
// unknown.
func (e *env) cpuSeconds() float64 {
	if e.dispatch == nil || e.dispatch.Process == nil {
		return -1
	}
	p, ok := e.procs.Proc(e.dispatch.Process.Pid)
	if !ok {
		return -1
	}
	return p.CPU.Seconds()
}

// dispatcherCPU is the dispatcher's CPU time since it started.
func (e *env) dispatcherCPU() string {
	if s := e.cpuSeconds(); s >= 0 {
		return fmt.Sprintf("%.1f s since its start", s)
	}
	return "n/a"
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}
