package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cronmesh/cronmesh/bench/internal/report"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

type createOptions struct {
	rate        float64
	duration    time.Duration
	warmup      time.Duration
	maxInFlight int
	requestIDs  bool
}

func createScenario() *scenario {
	o := &createOptions{}
	return &scenario{
		name:    "create",
		summary: "CreateJob at a constant rate (open loop); latency from the scheduled send time",
		register: func(fs *flag.FlagSet) {
			fs.Float64Var(&o.rate, "rate", targetCreateRate, "CreateJob calls per second")
			fs.DurationVar(&o.duration, "duration", 30*time.Second, "measured duration")
			fs.DurationVar(&o.warmup, "warmup", 5*time.Second, "unmeasured run at the same rate first")
			fs.IntVar(&o.maxInFlight, "max-in-flight", 512, "calls outstanding at once; a send that finds none free waits (and is counted)")
			fs.BoolVar(&o.requestIDs, "request-ids", true, "send a request_id with each job, as a client that retries does")
		},
		run: func(ctx context.Context, b *bench) error { return runCreate(ctx, b, o) },
	}
}

// lateAfter is how far behind its schedule a send may start before it is
// counted as late.
const lateAfter = time.Millisecond

// openLoopResult is what openLoop measured.
type openLoopResult struct {
	scheduled, issued int
	// waitedForSlot counts sends that found max-in-flight calls outstanding
	// and waited for one to finish; late counts sends that started more than
	// lateAfter after their scheduled time, for any reason (including the
	// load generator itself being starved of CPU).
	waitedForSlot, late int
	// latency is from the scheduled send time to the response, so a send
	// that started late is charged its delay (no coordinated omission);
	// service is from the actual send.
	latency, service []time.Duration
	errors           errorCounts
	start, end       time.Time
}

func (r *openLoopResult) ok() int { return len(r.latency) }

// openLoop calls call at rate per second for d, on a fixed schedule: call i
// is due at start + i/rate whether or not earlier calls have returned, as
// independent clients would send. Sends stop at start + d + grace even if
// some are still waiting for a free slot (they count as not issued).
func openLoop(ctx context.Context, rate float64, d time.Duration, maxInFlight int, call func(ctx context.Context, i int) error) *openLoopResult {
	n := int(rate * d.Seconds())
	interval := time.Duration(float64(time.Second) / rate)
	res := &openLoopResult{scheduled: n}
	lat := make([]time.Duration, n)
	svc := make([]time.Duration, n)
	failed := make([]bool, n)
	slots := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup

	res.start = time.Now().Add(10 * time.Millisecond)
	stopIssuing := time.NewTimer(time.Until(res.start.Add(d + 2*time.Second)))
	defer stopIssuing.Stop()
	timer := time.NewTimer(0)
	<-timer.C
	issued := 0
send:
	for i := range n {
		due := res.start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break send
			}
		}
		select {
		case slots <- struct{}{}:
		default:
			res.waitedForSlot++
			select {
			case slots <- struct{}{}:
			case <-stopIssuing.C:
				break send
			case <-ctx.Done():
				break send
			}
		}
		sent := time.Now()
		if sent.Sub(due) > lateAfter {
			res.late++
		}
		issued++
		wg.Go(func() {
			defer func() { <-slots }()
			err := call(ctx, i)
			done := time.Now()
			lat[i], svc[i] = done.Sub(due), done.Sub(sent)
			if err != nil {
				failed[i] = true
				res.errors.add(err)
			}
		})
	}
	wg.Wait()
	res.end = time.Now()
	res.issued = issued
	for i := range issued {
		if !failed[i] {
			res.latency = append(res.latency, lat[i])
			res.service = append(res.service, svc[i])
		}
	}
	return res
}

func runCreate(ctx context.Context, b *bench, o *createOptions) error {
	if o.rate <= 0 || o.duration <= 0 || o.maxInFlight <= 0 {
		return errors.New("--rate, --duration and --max-in-flight must be positive")
	}
	client, err := b.newClient()
	if err != nil {
		return err
	}
	// Jobs are built before the clock starts so that the load generator
	// spends its CPU on sending, not on building.
	runID := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	maker := newJobMaker(b.opts.seed, 0, time.Now())
	prefix := func(phase string) string {
		if !o.requestIDs {
			return ""
		}
		return runID + "-" + phase
	}
	warm := maker.createRequests(int(o.rate*o.warmup.Seconds()), prefix("warmup"))
	reqs := maker.createRequests(int(o.rate*o.duration.Seconds()), prefix("run"))
	callWith := func(reqs []*registryv1.CreateJobRequest) func(ctx context.Context, i int) error {
		return func(ctx context.Context, i int) error {
			ctx, cancel := context.WithTimeout(ctx, b.opts.callTimeout)
			defer cancel()
			_, err := client.CreateJob(ctx, connect.NewRequest(reqs[i]))
			return err
		}
	}

	b.waitQuiet(ctx)
	if o.warmup > 0 {
		b.logf("create: warming up for %s at %.0f/s", o.warmup, o.rate)
		w := openLoop(ctx, o.rate, o.warmup, o.maxInFlight, callWith(warm))
		if err := w.errors.err("warm-up"); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	b.logf("create: measuring for %s at %.0f/s", o.duration, o.rate)
	before := b.procs.snapshot()
	res := openLoop(ctx, o.rate, o.duration, o.maxInFlight, callWith(reqs))
	after := b.procs.snapshot()
	usage := b.procs.usage(before, after)

	window := max(res.end.Sub(res.start), o.duration)
	achieved := float64(res.ok()) / window.Seconds()
	lat, svc := summarize(res.latency), summarize(res.service)

	var out strings.Builder
	out.WriteString(section(fmt.Sprintf("create — CreateJob at %.0f requests/s, open loop", o.rate), b.cmdline))
	fmt.Fprintf(&out, "%s of CreateJob calls scheduled at a fixed rate after a %s warm-up (protocol %s, one HTTP/2 connection, request ids %v). "+
		"Latency counts from the time a call was due, so a late send is charged its delay; service time counts from the actual send.\n\n",
		o.duration, o.warmup, b.opts.protocol, onOff(o.requestIDs))
	out.WriteString(kvTable(
		kv("target rate", fmt.Sprintf("%.0f /s", o.rate)),
		kv("achieved rate (successful calls / window)", fmt.Sprintf("%.1f /s", achieved)),
		kv("scheduled / issued / succeeded", fmt.Sprintf("%d / %d / %d", res.scheduled, res.issued, res.ok())),
		kv("errors", res.errors.String()),
		kv(fmt.Sprintf("sends late by more than %s", lateAfter), fmt.Sprint(res.late)),
		kv(fmt.Sprintf("sends that waited for one of %d in-flight slots", o.maxInFlight), fmt.Sprint(res.waitedForSlot)),
	))
	out.WriteString("\n")
	out.WriteString(latencyHeader("CreateJob"))
	out.WriteString(latencyRow("latency from scheduled send", lat))
	out.WriteString(latencyRow("service time from actual send", svc))
	out.WriteString("\n")
	out.WriteString(cpuTableHeader())
	out.WriteString(usage.row("measured window"))
	out.WriteString(cpuNote([]cpuUsage{usage}))
	out.WriteString(b.registryMemory())
	out.WriteString("\n")

	ok := res.errors.total() == 0 && res.issued == res.scheduled && achieved >= 0.99*targetCreateRate &&
		lat.p99 < targetCreateP99Milli*time.Millisecond && o.rate >= targetCreateRate
	v := judge(ok)
	if o.rate < targetCreateRate {
		v = notJudged
	}
	out.WriteString(targetLine(v, fmt.Sprintf("CreateJob p99 under %d ms at %d requests/s", targetCreateP99Milli, targetCreateRate),
		fmt.Sprintf("p99 %s (service time p99 %s) at %.1f requests/s, %d errors", report.Ms(lat.p99), report.Ms(svc.p99), achieved, res.errors.total())))
	fmt.Fprint(b.out, out.String())
	return res.errors.err("create")
}

func onOff(v bool) string {
	if v {
		return "on"
	}
	return "off"
}

// registryMemory is a report line with the registry's resident memory, when
// its pid is known.
func (b *bench) registryMemory() string {
	if b.opts.registryPID == 0 {
		return ""
	}
	s := b.procs.snapshot()
	if s.RSS(groupRegistry) == 0 {
		return "Registry memory not read.\n"
	}
	return fmt.Sprintf("Registry resident memory: %s now, %s peak.\n", report.MiB(s.RSS(groupRegistry)), report.MiB(s.HWM(groupRegistry)))
}
