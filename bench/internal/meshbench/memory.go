package meshbench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cronmesh/cronmesh/bench/internal/heldjobs"
	"github.com/cronmesh/cronmesh/bench/internal/ledger"
	"github.com/cronmesh/cronmesh/bench/internal/pause"
	"github.com/cronmesh/cronmesh/bench/internal/procstat"
	"github.com/cronmesh/cronmesh/bench/internal/report"
	"github.com/cronmesh/cronmesh/bench/internal/workload"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/meshrun"
)

// MemoryOptions size the memory scenario.
type MemoryOptions struct {
	Jobs     int           // jobs in the trigger tier, including Firing
	Firing   int           // every-second jobs registered through the registry
	Duration time.Duration // how long the mesh runs with all of them
}

// Memory puts Jobs jobs into the trigger tier and reads the trigger nodes'
// memory. Registering 5,000,000 jobs through the registry and the trigger's
// projection takes most of an hour on this machine (docs/benchmarks/history-to-20261126.md), so
// all but Firing of them are written with COPY into the trigger's jobs table
// while its nodes are stopped, as the trigger's projection would store
// them; the nodes then start on that table. The Firing jobs go the whole
// way (BatchCreateJobs, the registry's events, the projection) and fire
// every second while memory is measured.
func Memory(ctx context.Context, cfg Config, o MemoryOptions) error {
	if o.Firing > o.Jobs || o.Jobs <= 0 || o.Duration <= 0 {
		return fmt.Errorf("meshbench: need 0 < firing <= jobs and a positive duration")
	}
	cfg.Ceiling = -1 // the ceilings say nothing about memory
	e, err := newEnv(ctx, cfg, "memory")
	if err != nil {
		return err
	}
	defer e.close()
	if err := e.startMesh(ctx); err != nil {
		return err
	}
	for _, p := range e.mesh.Triggers {
		if err := p.Stop(30 * time.Second); err != nil {
			return err
		}
	}
	var partitions int
	if err := e.trigger.QueryRow(ctx, `SELECT partitions FROM ring_meta`).Scan(&partitions); err != nil {
		return fmt.Errorf("reading the ring size: %w", err)
	}
	bulk := o.Jobs - o.Firing
	e.cfg.Log.Info("COPY into the trigger's jobs table", "rows", bulk)
	copyStart := time.Now()
	if err := copyJobs(ctx, e, bulk, partitions); err != nil {
		return err
	}
	copyTime := time.Since(copyStart)
	if _, err := e.trigger.Exec(ctx, `ANALYZE jobs`); err != nil {
		return err
	}
	var tableSize, indexSize int64
	_ = e.trigger.QueryRow(ctx, `SELECT pg_table_size('jobs'), pg_indexes_size('jobs')`).Scan(&tableSize, &indexSize)
	e.cfg.Log.Info("copied", "rows", bulk, "in", copyTime.Round(time.Second))
	restartStart := time.Now()
	for _, p := range append([]*meshrun.Process(nil), e.mesh.Triggers...) {
		if _, err := e.mesh.Restart(ctx, p); err != nil {
			return err
		}
	}
	restart := time.Since(restartStart)

	plan := workload.Constant(o.Firing, workload.EverySecond, time.Now(), o.Duration)
	regStart := time.Now()
	ids, regTime, err := e.register(ctx, plan)
	if err != nil {
		return err
	}
	projected, err := e.waitProjected(ctx, o.Jobs, time.Now().Add(5*time.Minute))
	if err != nil {
		return err
	}
	from := projected.Truncate(time.Second).Add(5 * time.Second)
	to := from.Add(o.Duration)
	e.cfg.Log.Info("running", "from", from.Format("15:04:05"), "to", to.Format("15:04:05"))
	window := ledger.NewWindow(plan, ids, from, to)
	if err := pause.Until(ctx, from); err != nil {
		return err
	}
	s0 := e.procs.Snapshot(e.tracked())
	if err := pause.Until(ctx, to); err != nil {
		return err
	}
	s1 := e.procs.Snapshot(e.tracked())
	for time.Now().Before(to.Add(30*time.Second)) && window.Observe(e.target) < window.Expected() {
		if err := pause.For(ctx, time.Second); err != nil {
			return err
		}
	}
	end := e.procs.Snapshot(e.tracked())
	aliveErr := e.checkAlive()
	res := ledger.Check(ledger.Input{Plan: plan, JobIDs: ids, From: from, To: to, SpanFrom: regStart.Truncate(time.Second), Deliveries: e.target.Deliveries()})

	var tier, tierNow uint64
	rows := [][]string{}
	for _, p := range e.mesh.Triggers {
		hwm, now := end.HWM(p.Name), end.RSS(p.Name)
		tier += hwm
		tierNow += now
		rows = append(rows, []string{p.Name, report.MiB(hwm), report.MiB(now)})
	}
	rows = append(rows, []string{"**trigger tier**", "**" + report.MiB(tier) + "**", report.MiB(tierNow)})

	var r report.Doc
	e.header(&r, fmt.Sprintf("End to end: memory with %s jobs in the trigger tier", report.Num(o.Jobs)))
	r.P("**Benchmark shortcut:** %s of the jobs were written with COPY (2 streams, %s, %.0f rows/s) into the trigger schema's `jobs` table while the trigger nodes were stopped, as the projection stores a CREATED event (partition = ring.Partition(id, %d), spec = the registryv1.Job protobuf without etag, update time and description, next_fire_at from libs/jobspec): daily crons `M H * * *` in four time zones, none due within 2 h, so they are held, not fired. The registry does not hold them. Table %s, indexes %s. The nodes were then restarted on that table (%s for all of them to be ready).",
		report.Num(bulk), copyTime.Round(time.Second), float64(bulk)/copyTime.Seconds(), partitions, report.MiB(uint64(tableSize)), report.MiB(uint64(indexSize)), restart.Round(time.Millisecond))
	r.P("")
	r.P("%s every-second jobs went the whole way (BatchCreateJobs in %s, the registry's events, the projection: all %s jobs held %s after the first call) and fired during the %s measured from %s: %s slots due, %s missed, %s fired twice; lateness p50 %s, p99 %s, max %s.",
		report.Num(o.Firing), regTime.Round(time.Millisecond), report.Num(o.Jobs), projected.Sub(regStart).Round(time.Millisecond), o.Duration, from.UTC().Format("15:04:05"),
		report.Num(res.Expected), report.Num(res.Missed), report.Num(res.DeliveredTwice),
		report.Ms(report.Quantile(res.Lateness, 0.5)), report.Ms(report.Quantile(res.Lateness, 0.99)), report.Ms(report.Quantile(res.Lateness, 1)))
	r.Table([]string{"trigger node", "peak RSS (VmHWM)", "RSS at the end"}, rows)
	r.Usage(procstat.Between(s0, s1), e.groups(), &end)
	r.H(3, "Targets")
	r.Table([]string{"target", "measured", "verdict"}, [][]string{
		{"5,000,000 jobs registered with the trigger tier < 300 MB", fmt.Sprintf("%s jobs: peak RSS of the tier (%d nodes, summed) %s", report.Num(o.Jobs), len(e.mesh.Triggers), report.MiB(tier)),
			report.JudgeIf(o.Jobs >= 5_000_000, tier < targetMemory)},
	})
	if err := r.Emit(e.cfg.Out); err != nil {
		return err
	}
	return aliveErr
}

// copyJobs writes n daily-cron jobs into the trigger's jobs table as its
// projection stores CREATED events, in two COPY streams.
func copyJobs(ctx context.Context, e *env, n, partitions int) error {
	targetURL := strings.TrimRight(e.target.URL, "/") + "/never"
	_, err := heldjobs.Copy(ctx, e.trigger, heldjobs.Options{
		Jobs: n, Streams: 2, Namespace: namespace, Partitions: partitions,
		Job: func(id string, i int, schedule *registryv1.Schedule, created time.Time) *registryv1.Job {
			return &registryv1.Job{
				Id: id, Namespace: namespace, DisplayName: fmt.Sprintf("held %d", i),
				Labels:     map[string]string{"bench": "mesh", "kind": "held"},
				Schedule:   schedule,
				Target:     &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Method: "POST", Url: targetURL, SigningSecret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}},
				CreateTime: timestamppb.New(created), Version: 1,
			}
		},
	})
	return err
}
