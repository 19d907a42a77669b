package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/cronmesh/cronmesh/bench/internal/report"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
)

type listOptions struct {
	calls     int
	deepPages int
	pageSize  int
	warmup    int
	label     string
	rareLabel string
	maxTime   time.Duration
}

func listScenario() *scenario {
	o := &listOptions{}
	return &scenario{
		name:    "list",
		summary: "ListJobs latency on the loaded table: first page, deep pages, label and paused filters",
		register: func(fs *flag.FlagSet) {
			fs.IntVar(&o.calls, "calls", 1000, "measured calls per variant")
			fs.IntVar(&o.deepPages, "deep-pages", 2000, "pages to walk with page tokens in the deep-pages variant")
			fs.IntVar(&o.pageSize, "page-size", 100, "page_size of every call")
			fs.IntVar(&o.warmup, "warmup", 20, "unmeasured calls before each variant")
			fs.StringVar(&o.label, "label", "team=payments", "label filter key=value matching a common label (1 job in 8 in the generated mix)")
			fs.StringVar(&o.rareLabel, "rare-label", "tier=critical", "label filter key=value matching a rare label (1 job in 200); empty skips it")
			fs.DurationVar(&o.maxTime, "variant-time", time.Minute, "stop a variant after this long even if it has not made all its calls (a slow query plan would otherwise hold up the run)")
		},
		run: func(ctx context.Context, b *bench) error { return runList(ctx, b, o) },
	}
}

// listVariant is one way of calling ListJobs.
type listVariant struct {
	name string
	// walk follows next_page_token (starting over at the end); otherwise
	// every call asks for the first page.
	walk   bool
	calls  int
	labels map[string]string
	paused *bool
}

type listResult struct {
	variant  listVariant
	latency  summary
	meanJobs float64 // jobs per page returned
	deepest  int     // jobs walked past at the deepest page
	restarts int     // walks that reached the end and started over
	cutShort bool    // stopped by --variant-time
	errors   errorCounts
	cpu      cpuUsage
}

func parseLabel(s string) (map[string]string, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return nil, fmt.Errorf("label filter %q: want key=value", s)
	}
	return map[string]string{k: v}, nil
}

func runList(ctx context.Context, b *bench, o *listOptions) error {
	if o.calls <= 0 || o.pageSize <= 0 || o.deepPages <= 0 {
		return errors.New("--calls, --page-size and --deep-pages must be positive")
	}
	db, err := b.database(ctx)
	if err != nil {
		return err
	}
	total, err := jobCount(ctx, b, db)
	if err != nil {
		return err
	}
	client, err := b.newClient()
	if err != nil {
		return err
	}
	label, err := parseLabel(o.label)
	if err != nil {
		return err
	}
	paused := true
	variants := []listVariant{
		{name: "first page", calls: o.calls},
		{name: fmt.Sprintf("walk %d pages with page tokens", o.deepPages), walk: true, calls: o.deepPages},
		{name: "label " + o.label + ", walk", walk: true, calls: o.calls, labels: label},
	}
	if o.rareLabel != "" {
		rare, err := parseLabel(o.rareLabel)
		if err != nil {
			return err
		}
		variants = append(variants, listVariant{name: "label " + o.rareLabel + " (rare), walk", walk: true, calls: o.calls, labels: rare})
	}
	variants = append(variants, listVariant{name: "paused=true, walk", walk: true, calls: o.calls, paused: &paused})

	var results []*listResult
	var errs []error
	for _, v := range variants {
		b.waitQuiet(ctx)
		b.logf("list: %s (%d calls)", v.name, v.calls)
		r := listCalls(ctx, b, client, v, o.pageSize, o.warmup, o.maxTime)
		results = append(results, r)
		if err := r.errors.err("ListJobs " + v.name); err != nil {
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}

	var out strings.Builder
	out.WriteString(section(fmt.Sprintf("list — ListJobs, page size %d, %s jobs in the table", o.pageSize, report.Num(total)), b.cmdline))
	fmt.Fprintf(&out, "Sequential calls from one client (protocol %s), each variant after %d unmeasured calls. "+
		"Walks follow next_page_token from the first page and start over when a walk reaches the end.\n\n", b.opts.protocol, o.warmup)
	out.WriteString("| variant | calls | p50 | p90 | p99 | max | jobs per page | deepest page starts after | errors |\n")
	out.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range results {
		deepest := "-"
		if r.variant.walk {
			deepest = report.Num(int64(r.deepest)) + " jobs"
			if r.restarts > 0 {
				deepest += fmt.Sprintf(" (%d restarts)", r.restarts)
			}
		}
		calls := report.Num(int64(r.latency.count))
		if r.cutShort {
			calls += fmt.Sprintf(" (stopped after %s)", o.maxTime)
		}
		fmt.Fprintf(&out, "| %s | %s | %s | %s | %s | %s | %.1f | %s | %s |\n", r.variant.name, calls,
			report.Ms(r.latency.p50), report.Ms(r.latency.p90), report.Ms(r.latency.p99), report.Ms(r.latency.mx), r.meanJobs, deepest, r.errors.String())
	}
	out.WriteString("\n")
	out.WriteString(cpuTableHeader())
	var usages []cpuUsage
	for _, r := range results {
		out.WriteString(r.cpu.row(r.variant.name))
		usages = append(usages, r.cpu)
	}
	out.WriteString(cpuNote(usages))
	out.WriteString(b.registryMemory())
	out.WriteString("\n")

	target := fmt.Sprintf("ListJobs of %d from a table of %s jobs under %d ms (p99)", o.pageSize, report.Num(targetListJobs), targetListP99Milli)
	for _, r := range results {
		v := judge(r.latency.p99 < targetListP99Milli*time.Millisecond && r.errors.total() == 0)
		if total < targetListJobs || o.pageSize != 100 {
			v = notJudged
		}
		out.WriteString(targetLine(v, target+", "+r.variant.name, fmt.Sprintf("p99 %s, max %s", report.Ms(r.latency.p99), report.Ms(r.latency.mx))))
	}
	fmt.Fprint(b.out, out.String())
	return errors.Join(errs...)
}

// listCalls runs one variant: warmup calls, then v.calls measured ones.
func listCalls(ctx context.Context, b *bench, client registryv1connect.JobServiceClient, v listVariant, pageSize, warmup int, maxTime time.Duration) *listResult {
	res := &listResult{variant: v}
	token := ""
	position := 0
	var latencies []time.Duration
	jobs := 0
	call := func(measure bool) {
		req := &registryv1.ListJobsRequest{PageSize: int32(pageSize), Labels: v.labels, Paused: v.paused}
		if v.walk {
			req.PageToken = token
		}
		callCtx, cancel := context.WithTimeout(ctx, b.opts.callTimeout)
		t0 := time.Now()
		resp, err := client.ListJobs(callCtx, connect.NewRequest(req))
		d := time.Since(t0)
		cancel()
		if err != nil {
			res.errors.add(err)
			return
		}
		if !measure {
			return
		}
		latencies = append(latencies, d)
		jobs += len(resp.Msg.Jobs)
		if v.walk {
			res.deepest = max(res.deepest, position)
			position += len(resp.Msg.Jobs)
			token = resp.Msg.NextPageToken
			if token == "" {
				position = 0
				res.restarts++
			}
		}
	}
	for range warmup {
		call(false)
	}
	before := b.procs.snapshot()
	stop := before.At.Add(maxTime)
	for range v.calls {
		if ctx.Err() != nil {
			break
		}
		if time.Now().After(stop) {
			res.cutShort = true
			break
		}
		call(true)
		if res.errors.total() >= 10 {
			break
		}
	}
	res.cpu = b.procs.usage(before, b.procs.snapshot())
	res.latency = summarize(latencies)
	if len(latencies) > 0 {
		res.meanJobs = float64(jobs) / float64(len(latencies))
	}
	return res
}
