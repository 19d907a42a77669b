package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/cronmesh/cronmesh/bench/internal/report"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
)

// batchTemplates is how many distinct batches each caller builds and then
// cycles through. Building 1,000 realistic jobs costs the client a few
// milliseconds of CPU that the registry, on the same two cores, would not
// get; the registry gives every job a fresh id, so repeating job contents
// changes nothing it does.
const batchTemplates = 8

type batchOptions struct {
	callers      intList
	total        int
	batchSize    int
	requestIDs   bool
	drainTimeout time.Duration
}

func batchScenario() *scenario {
	o := &batchOptions{callers: intList{2, 4}}
	return &scenario{
		name:    "batch",
		summary: "BatchCreateJobs throughput with N concurrent callers, and how fast the outbox relay drains the events",
		register: func(fs *flag.FlagSet) {
			fs.Var(&o.callers, "callers", "comma-separated concurrent caller counts, one run each")
			fs.IntVar(&o.total, "total", 200_000, "jobs per run")
			fs.IntVar(&o.batchSize, "batch-size", 1000, "jobs per BatchCreateJobs call (the API allows 1 to 1,000)")
			fs.BoolVar(&o.requestIDs, "request-ids", false, "send a request_id with each job")
			fs.DurationVar(&o.drainTimeout, "drain-timeout", 10*time.Minute, "how long to wait for the outbox relay to publish everything")
		},
		run: func(ctx context.Context, b *bench) error { return runBatch(ctx, b, o) },
	}
}

// intList is a comma-separated list of positive integers flag.
type intList []int

func (l *intList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, v := range *l {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

func (l *intList) Set(s string) error {
	var out intList
	for part := range strings.SplitSeq(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || v <= 0 {
			return fmt.Errorf("%q is not a positive integer", part)
		}
		out = append(out, v)
	}
	*l = out
	return nil
}

// batchRun is one run of concurrent BatchCreateJobs callers.
type batchRun struct {
	callers, jobs, calls int
	start, end           time.Time
	perCall              []time.Duration
	errors               errorCounts
	// windows are jobs/s over consecutive progress intervals.
	windows []float64
}

func (r *batchRun) jobsPerSecond() float64 { return float64(r.jobs) / r.end.Sub(r.start).Seconds() }

// createBatches sends total jobs in BatchCreateJobs calls of batchSize from
// callers concurrent callers, each on its own connection, and logs progress
// every progressEvery.
func createBatches(ctx context.Context, b *bench, callers, total, batchSize int, requestIDs bool, progressEvery time.Duration) (*batchRun, error) {
	if callers <= 0 || total <= 0 || batchSize <= 0 || batchSize > 1000 {
		return nil, errors.New("callers and total must be positive, batch size 1 to 1,000")
	}
	clients := make([]clientAndJobs, callers)
	runID := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	for c := range clients {
		client, err := b.newClient()
		if err != nil {
			return nil, err
		}
		maker := newJobMaker(b.opts.seed, uint64(c+1), time.Now())
		clients[c].client = client
		for range batchTemplates {
			clients[c].batches = append(clients[c].batches, &registryv1.BatchCreateJobsRequest{Requests: maker.createRequests(batchSize, "")})
		}
	}

	nBatches := (total + batchSize - 1) / batchSize
	run := &batchRun{callers: callers}
	var (
		next    atomic.Int64
		created atomic.Int64
		mu      sync.Mutex
		wg      sync.WaitGroup
	)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	progressDone := make(chan struct{})
	run.start = time.Now()
	go func() {
		defer close(progressDone)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		last, lastAt := int64(0), run.start
		for {
			select {
			case <-runCtx.Done():
				return
			case now := <-t.C:
				n := created.Load()
				r := float64(n-last) / now.Sub(lastAt).Seconds()
				mu.Lock()
				run.windows = append(run.windows, r)
				mu.Unlock()
				b.logf("%s jobs created (%s/s over the last %s)", report.Num(n), report.Rate(r), progressEvery)
				last, lastAt = n, now
			}
		}
	}()
	for c := range callers {
		wg.Go(func() {
			cl := clients[c]
			for k := 0; runCtx.Err() == nil; k++ {
				batch := int(next.Add(1) - 1)
				if batch >= nBatches {
					return
				}
				req := cl.batches[k%len(cl.batches)]
				size := min(batchSize, total-batch*batchSize)
				msg := req
				if size < len(req.Requests) {
					msg = &registryv1.BatchCreateJobsRequest{Requests: req.Requests[:size]}
				}
				if requestIDs {
					for i, r := range msg.Requests {
						r.RequestId = fmt.Sprintf("%s-%d-%d", runID, batch, i)
					}
				}
				callCtx, callCancel := context.WithTimeout(runCtx, b.opts.callTimeout)
				t0 := time.Now()
				resp, err := cl.client.BatchCreateJobs(callCtx, connect.NewRequest(msg))
				d := time.Since(t0)
				callCancel()
				if err != nil {
					run.errors.add(err)
					// A failing registry fails every call: stop rather than
					// hammer it for the rest of the run.
					if run.errors.total() >= 10 {
						cancel()
					}
					continue
				}
				created.Add(int64(len(resp.Msg.Jobs)))
				mu.Lock()
				run.perCall = append(run.perCall, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	run.end = time.Now()
	cancel()
	<-progressDone
	run.jobs = int(created.Load())
	run.calls = len(run.perCall)
	if ctx.Err() != nil {
		return run, ctx.Err()
	}
	return run, run.errors.err("BatchCreateJobs")
}

type clientAndJobs struct {
	client  registryv1connect.JobServiceClient
	batches []*registryv1.BatchCreateJobsRequest
}

// drainResult is how long the outbox relay took to publish a run's events.
type drainResult struct {
	events int
	// done is when the outbox was first seen empty.
	done time.Time
	cpu  cpuUsage // from the end of the writes to done
}

func runBatch(ctx context.Context, b *bench, o *batchOptions) error {
	db, err := b.database(ctx)
	if err != nil {
		return err
	}
	var out strings.Builder
	out.WriteString(section("batch — BatchCreateJobs throughput, events included", b.cmdline))
	fmt.Fprintf(&out, "Each run creates %s jobs in calls of %s (protocol %s, each caller on its own HTTP/2 connection, request ids %v). "+
		"A job and its CREATED event are committed in one transaction, so jobs/s counts jobs with their events in the outbox. "+
		"Relay drain: the outbox relay publishes those events to RabbitMQ (with publisher confirms) while the writes go on; "+
		"\"drained\" is when the outbox was first seen empty (polled every 250 ms).\n\n",
		report.Num(int64(o.total)), report.Num(int64(o.batchSize)), b.opts.protocol, onOff(o.requestIDs))
	out.WriteString("| callers | jobs | wall | jobs/s | call p50 | call p99 | call max | errors | relay: drained after last commit | relay events/s (first write → drained) |\n")
	out.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	var cpuRows strings.Builder
	var usages []cpuUsage
	best := 0.0
	var runErr error
	vacuumNote := ""
	for _, callers := range o.callers {
		if err := waitDrained(ctx, b, db, o.drainTimeout); err != nil {
			return fmt.Errorf("outbox not empty before the run: %w", err)
		}
		b.waitQuiet(ctx)
		b.logf("batch: %d callers, %s jobs", callers, report.Num(int64(o.total)))
		before := b.procs.snapshot()
		run, err := createBatches(ctx, b, callers, o.total, o.batchSize, o.requestIDs, 5*time.Second)
		if run == nil {
			return err
		}
		mid := b.procs.snapshot()
		writeCPU := b.procs.usage(before, mid)
		runErr = errors.Join(runErr, err)
		drain, derr := measureDrain(ctx, b, db, run, o.drainTimeout)
		if derr != nil {
			return derr
		}
		drain.cpu = b.procs.usage(mid, b.procs.snapshot())
		// Outside the measured windows: the next run starts on a vacuumed
		// outbox, as it would with autovacuum.
		note, verr := standInForAutovacuum(ctx, b, db)
		if verr != nil {
			return verr
		}
		vacuumNote = note
		jps := run.jobsPerSecond()
		best = max(best, jps)
		calls := summarize(run.perCall)
		fmt.Fprintf(&out, "| %d | %s | %.1f s | %s | %s | %s | %s | %s | %.1f s | %s |\n",
			callers, report.Num(int64(run.jobs)), run.end.Sub(run.start).Seconds(), report.Rate(jps),
			report.Ms(calls.p50), report.Ms(calls.p99), report.Ms(calls.mx), run.errors.String(),
			drain.done.Sub(run.end).Seconds(), report.Rate(float64(run.jobs)/drain.done.Sub(run.start).Seconds()))
		cpuRows.WriteString(writeCPU.row(fmt.Sprintf("%d callers: writes", callers)))
		cpuRows.WriteString(drain.cpu.row(fmt.Sprintf("%d callers: relay drain after the writes", callers)))
		usages = append(usages, writeCPU, drain.cpu)
		if runErr != nil {
			break
		}
	}
	out.WriteString("\n" + vacuumNote)
	out.WriteString("\n")
	out.WriteString(cpuTableHeader())
	out.WriteString(cpuRows.String())
	out.WriteString(cpuNote(usages))
	out.WriteString(b.registryMemory())
	out.WriteString("\n")
	out.WriteString(targetLine(judge(best >= targetBatchJobsPerS && runErr == nil),
		fmt.Sprintf("BatchCreateJobs at least %s jobs/s into PostgreSQL with their events", report.Num(targetBatchJobsPerS)),
		fmt.Sprintf("best %s jobs/s", report.Rate(best))))
	fmt.Fprint(b.out, out.String())
	return runErr
}
