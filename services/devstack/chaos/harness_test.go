package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/meshrun"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/libs/testkit/etcdtest"
	"github.com/cronmesh/cronmesh/libs/testkit/ledger"
	"github.com/cronmesh/cronmesh/libs/testkit/meshtest"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
)

const (
	namespace = "chaos"
	apiKey    = "chaos-key-0123456789abcdef"
	// steady is how long the load runs before the fault.
	steady = 5 * time.Second
	// jobTimeout is each delivery's timeout: a hanging target fails an
	// attempt after it.
	jobTimeout = 2 * time.Second
)

// retryTiers are the dispatcher's delay tiers: up to 16 s, so that a job's
// 10 retries (1 s doubling to 16 s: about two minutes) outlast the longest
// outage of the suite.
var retryTiers = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}

// config is the suite's size, from the environment; the defaults are the
// short version `make test` runs.
type config struct {
	jobs   int           // every-second jobs (CRONMESH_CHAOS_JOBS, default 200)
	after  time.Duration // load after recovery (CRONMESH_CHAOS_AFTER, default 10s)
	outage time.Duration // how long a stopped dependency stays down (CRONMESH_CHAOS_OUTAGE, default 5s)
	hang   time.Duration // how long the target hangs (CRONMESH_CHAOS_HANG, default 10s)
}

func loadConfig(t *testing.T) config {
	t.Helper()
	c := config{jobs: 200, after: 10 * time.Second, outage: 5 * time.Second, hang: 10 * time.Second}
	if v := os.Getenv("CRONMESH_CHAOS_JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "CRONMESH_CHAOS_JOBS")
		c.jobs = n
	}
	for name, d := range map[string]*time.Duration{"CRONMESH_CHAOS_AFTER": &c.after, "CRONMESH_CHAOS_OUTAGE": &c.outage, "CRONMESH_CHAOS_HANG": &c.hang} {
		if v := os.Getenv(name); v != "" {
			parsed, err := time.ParseDuration(v)
			require.NoError(t, err, name)
			*d = parsed
		}
	}
	return c
}

// run is one scenario's mesh, target, tap and ledger.
type run struct {
	t      *testing.T
	cfg    config
	etcd   *etcdtest.Cluster
	mesh   *meshrun.Mesh
	target *target
	ledger *ledger.Ledger
	jobs   []string          // job ids, in creation order
	tokens map[string]string // URL token → job id
	from   time.Time         // first slot of the checked window
}

// servers are the PostgreSQL and RabbitMQ a scenario's mesh runs on; an
// empty field is the server every test shares.
type servers struct{ postgres, amqp string }

// start runs a mesh of triggers trigger nodes on the shared servers, the
// target and the tap, registers the jobs and returns once every job has
// fired.
func start(t *testing.T, triggers int) *run { return startOn(t, triggers, servers{}) }

// startOn is start on the given servers: a scenario that restarts one
// runs on a server of its own.
func startOn(t *testing.T, triggers int, on servers) *run {
	cfg := loadConfig(t)
	r := &run{t: t, cfg: cfg, ledger: ledger.New(), tokens: map[string]string{}}
	r.target = newTarget()
	srv := httptest.NewServer(r.target)
	t.Cleanup(srv.Close)
	t.Cleanup(r.target.release)
	r.etcd = etcdtest.New(t)
	r.mesh = meshtest.Start(t, bins, meshtest.Options{
		APIKeys: map[string]string{namespace: apiKey}, TriggerNodes: triggers, RetryTiers: retryTiers, Etcd: r.etcd,
		PostgresURL: on.postgres, AMQPURL: on.amqp,
	})
	r.startTap()
	r.createJobs(srv.URL)
	require.Eventually(t, func() bool { return r.ledger.EnqueuedJobs() == len(r.jobs) }, time.Minute, 200*time.Millisecond,
		"not every job fired within a minute of its creation")
	r.from = time.Now().Truncate(time.Second).Add(time.Second)
	t.Logf("%d every-second jobs firing; the checked window starts at %s", len(r.jobs), r.from.UTC().Format(time.TimeOnly))
	return r
}

func (r *run) createJobs(targetURL string) {
	client := registryv1connect.NewJobServiceClient(http.DefaultClient, r.mesh.Registry.URL, rpctest.Bearer(apiKey))
	for first := 0; first < r.cfg.jobs; first += 1000 {
		var reqs []*registryv1.CreateJobRequest
		for i := first; i < min(first+1000, r.cfg.jobs); i++ {
			reqs = append(reqs, &registryv1.CreateJobRequest{Job: &registryv1.Job{
				DisplayName: fmt.Sprintf("chaos-%d", i),
				Schedule:    &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "* * * * * *"}},
				Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
					Url: fmt.Sprintf("%s/hook/%d", targetURL, i), Timeout: durationpb.New(jobTimeout),
				}}},
				RetryPolicy: &registryv1.RetryPolicy{
					MaxRetries: proto.Int32(10), InitialBackoff: durationpb.New(time.Second),
					MaxBackoff: durationpb.New(16 * time.Second), Multiplier: 2,
				},
			}})
		}
		resp, err := client.BatchCreateJobs(r.t.Context(), connect.NewRequest(&registryv1.BatchCreateJobsRequest{Requests: reqs}))
		require.NoError(r.t, err)
		for i, job := range resp.Msg.GetJobs() {
			r.jobs = append(r.jobs, job.GetId())
			r.tokens[strconv.Itoa(first+i)] = job.GetId()
		}
	}
}

// sleepUntil waits for the wall clock: the mesh fires on real time.
func sleepUntil(at time.Time) { time.Sleep(time.Until(at)) }

// steadyThenFault waits until the load has run steadily, and returns the
// fault's time.
func (r *run) steadyThenFault(what string) time.Time {
	sleepUntil(r.from.Add(steady))
	r.t.Logf("fault: %s", what)
	return time.Now()
}

// finish keeps the load on for the configured window after recovery, then
// waits for every slot of the window to be delivered (bounded by settle),
// and checks the ledger, the history and the consumers. It logs the
// scenario's recovery time and appends its row to the summary.
func (r *run) finish(scenario string, fault time.Time, settle time.Duration) {
	t := r.t
	t.Logf("recovered %s after the fault; load goes on for %s", time.Since(fault).Round(time.Millisecond), r.cfg.after)
	time.Sleep(r.cfg.after)
	to := time.Now().Truncate(time.Second).Add(-time.Second)

	deadline := time.Now().Add(settle)
	var v ledger.Verdict
	for {
		r.feedDeliveries()
		v = r.ledger.Check(r.jobs, r.from, to, fault)
		if len(v.Missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	time.Sleep(2 * time.Second) // late duplicates, if any, are counted too
	r.feedDeliveries()
	v = r.ledger.Check(r.jobs, r.from, to, fault)
	t.Logf("%s: %s", scenario, v)
	if len(v.Republished) > 0 {
		t.Logf("republished by the outbox relay (same message id), e.g. %v", v.Republished[:min(5, len(v.Republished))])
	}
	err := v.Err()
	if err == nil {
		err = r.checkConsumers(r.from, to)
	}
	summarize(scenario, r.cfg.jobs, v, err)
	require.NoError(t, err)
}

// feedDeliveries hands the target's records to the ledger, naming each
// delivery's job by the token of its URL.
func (r *run) feedDeliveries() {
	for _, d := range r.target.take() {
		job, ok := r.tokens[d.token]
		if !ok {
			job = "unknown token " + d.token
		}
		r.ledger.Delivered(job, d.webhookID, d.at)
	}
}

// checkConsumers waits until history's and alerting's queues are drained
// with a consumer on each, and history holds every execution of the window
// once: per job, as many runs as seconds.
func (r *run) checkConsumers(from, to time.Time) error {
	ctx := r.t.Context()
	want := to.Unix() - from.Unix() + 1
	history := historyv1connect.NewHistoryServiceClient(http.DefaultClient, r.mesh.History.URL, rpctest.Bearer(apiKey))
	deadline := time.Now().Add(2 * time.Minute)
	var problem error
	for time.Now().Before(deadline) {
		problem = r.queuesDrained(r.mesh.Names.HistoryExecutions, r.mesh.Names.AlertingExecutions)
		if problem == nil {
			problem = func() error {
				for _, job := range r.jobs {
					resp, err := history.GetJobStats(ctx, connect.NewRequest(&historyv1.GetJobStatsRequest{
						JobId: job, StartTime: timestamppb.New(from), EndTime: timestamppb.New(to.Add(time.Second)),
					}))
					if err != nil {
						return fmt.Errorf("history: GetJobStats: %w", err)
					}
					if got := resp.Msg.GetRuns(); got != want {
						return fmt.Errorf("history holds %d executions of job %s in the window, want %d", got, job, want)
					}
				}
				return nil
			}()
		}
		if problem == nil {
			r.t.Logf("history holds all %d executions of every job; history and alerting drained their queues", want)
			return nil
		}
		time.Sleep(time.Second)
	}
	return problem
}

// queuesDrained is nil when every queue has no ready message and a
// consumer.
func (r *run) queuesDrained(queues ...string) error {
	conn, err := amqp091.Dial(r.mesh.AMQPURL())
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, q := range queues {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		ch.Close()
		if err != nil {
			return fmt.Errorf("queue %s: %w", q, err)
		}
		if st.Messages > 0 || st.Consumers == 0 {
			return fmt.Errorf("queue %s: %d messages ready, %d consumers", q, st.Messages, st.Consumers)
		}
	}
	return nil
}

// startTap binds a quorum queue of its own to the mesh's dispatch exchange
// with "#" (first attempts "dispatch.*" and retries coming back from the
// delay tiers) and records every request in the ledger until the test
// ends, reconnecting across a broker restart.
func (r *run) startTap() {
	queue := r.mesh.Names.Dispatch + ".chaos-tap"
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	seen := map[string]bool{} // message ids recorded, to skip our own redeliveries
	wg.Go(func() {
		for ctx.Err() == nil {
			err := r.tapOnce(ctx, queue, seen, func() { once.Do(func() { close(ready) }) })
			if ctx.Err() == nil {
				r.t.Logf("tap: %v; reconnecting", err)
				select {
				case <-ctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
			}
		}
	})
	r.t.Cleanup(func() {
		cancel()
		wg.Wait()
		if conn, err := amqp091.Dial(r.mesh.AMQPURL()); err == nil {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(queue, false, false, false)
			}
			conn.Close()
		}
	})
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		r.t.Fatal("the tap did not subscribe within 30 s")
	}
}

func (r *run) tapOnce(ctx context.Context, queue string, seen map[string]bool, subscribed func()) error {
	conn, err := amqp091.Dial(r.mesh.AMQPURL())
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp091.Table{"x-queue-type": "quorum"}); err != nil {
		return err
	}
	if err := ch.QueueBind(queue, "#", r.mesh.Names.Dispatch, false, nil); err != nil {
		return err
	}
	if err := ch.Qos(2000, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	subscribed()
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("the tap's deliveries closed")
			}
			at := time.Now()
			if !(d.Redelivered && seen[d.MessageId]) {
				msgs, err := broker.DeliveryMessages(d)
				if err != nil {
					r.ledger.Bad(fmt.Sprintf("undecodable dispatch message %q: %v", d.MessageId, err))
				}
				for _, m := range msgs {
					req := &dispatchv1.DispatchRequest{}
					if err := proto.Unmarshal(m.Payload, req); err != nil {
						r.ledger.Bad(fmt.Sprintf("undecodable dispatch request %q: %v", m.UUID, err))
						continue
					}
					r.ledger.Enqueued(req, m.Metadata.Get(outbox.RowIDHeader), at)
				}
				seen[d.MessageId] = true
			}
			if err := d.Ack(false); err != nil {
				return err
			}
		}
	}
}

// target is the recording HTTP target. A request counts as delivered when
// the target answers it 204 on a connection still open; while held or
// hanging it answers nothing.
type target struct {
	mu      sync.Mutex
	records []record
	holdC   chan struct{} // non-nil: requests wait for it to close
	hangTo  time.Time     // requests arriving before it hang until it
	held    atomic.Int64  // requests waiting on holdC now
}

type record struct {
	token, webhookID string
	at               time.Time
}

func newTarget() *target { return &target{} }

func (tg *target) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	tg.mu.Lock()
	hold, hangTo := tg.holdC, tg.hangTo
	tg.mu.Unlock()
	if hold != nil {
		tg.held.Add(1)
		select {
		case <-hold:
		case <-req.Context().Done():
		}
		tg.held.Add(-1)
	}
	if wait := time.Until(hangTo); wait > 0 {
		select {
		case <-time.After(wait):
		case <-req.Context().Done():
		}
	}
	if req.Context().Err() != nil {
		return // the dispatcher gave up or died: not delivered
	}
	tg.mu.Lock()
	tg.records = append(tg.records, record{
		token: strings.TrimPrefix(req.URL.Path, "/hook/"), webhookID: req.Header.Get("webhook-id"), at: time.Now(),
	})
	tg.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// hold makes requests wait until release.
func (tg *target) hold() {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if tg.holdC == nil {
		tg.holdC = make(chan struct{})
	}
}

// release lets held requests go; safe to call twice.
func (tg *target) release() {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if tg.holdC != nil {
		close(tg.holdC)
		tg.holdC = nil
	}
}

// hang makes every request arriving in the next d wait until d has passed.
func (tg *target) hang(d time.Duration) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.hangTo = time.Now().Add(d)
}

func (tg *target) take() []record {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	out := tg.records
	tg.records = nil
	return out
}

// summarize appends the scenario's row to $CRONMESH_CHAOS_SUMMARY (a
// Markdown table `make chaos` prints at the end), when set.
func summarize(scenario string, jobs int, v ledger.Verdict, err error) {
	path := os.Getenv("CRONMESH_CHAOS_SUMMARY")
	if path == "" {
		return
	}
	f, ferr := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if ferr != nil {
		return
	}
	defer f.Close()
	verdict := "pass"
	if err != nil {
		verdict = "FAIL"
	}
	fmt.Fprintf(f, "| %s | %d | %d | %s | %s | %d | %d | %d | %s |\n", scenario, jobs, v.Slots,
		v.Recovery.Round(100*time.Millisecond), v.MaxLate.Round(100*time.Millisecond), v.Retries, len(v.Republished), v.Duplicates, verdict)
}
