package firing

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the engine's Prometheus collectors. They always exist, so the
// engine never checks for nil; they are registered only when
// Options.Metrics is set.
type metrics struct {
	lateness       prometheus.Histogram
	scheduled      prometheus.Counter
	catchUp        prometheus.Counter
	missed         prometheus.Counter
	commitDuration prometheus.Histogram
	heapSize       prometheus.Gauge
	crowds         prometheus.Gauge
	commitErrors   prometheus.Counter
	fenced         prometheus.Counter
	stale          prometheus.Counter
	duplicates     prometheus.Counter
	loadErrors     prometheus.Counter
	planErrors     prometheus.Counter
	wholeReads     prometheus.Counter
	sliceReads     prometheus.Counter
	loadedRows     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (metrics, error) {
	slots := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trigger_slots_total",
		Help: "Slots committed to the ledger, by kind (scheduled, catch_up, missed).",
	}, []string{"kind"})
	reads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trigger_partition_reads_total",
		Help: "Partitions read by loads, by kind: whole (every job due within the lookahead), or new_slots (only the jobs whose next slot came within it since the partition's last load).",
	}, []string{"kind"})
	m := metrics{
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "trigger_fire_lateness_seconds",
			Help: "For fired slots (scheduled and catch_up): commit completion time minus the slot's commit time (its firing time, the nominal time plus the job's spread offset, less the node's --lead).",
			// 1 ms to 60 s: the steady-state aim is p99 under 100 ms, the
			// promise 5 s; catch-up after downtime lands in the top buckets.
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		scheduled: slots.WithLabelValues("scheduled"),
		catchUp:   slots.WithLabelValues("catch_up"),
		missed:    slots.WithLabelValues("missed"),
		commitDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "trigger_commit_duration_seconds",
			Help:    "Duration of Store.Commit calls (one per batch), failed ones included.",
			Buckets: prometheus.ExponentialBuckets(.001, 2, 15), // 1 ms to 16 s
		}),
		heapSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trigger_heap_size",
			Help: "Jobs held in memory waiting for their firing time.",
		}),
		crowds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trigger_crowd_seconds",
			Help: "Seconds within the lookahead that the last load found crowded (--crowd-size and --crowd-factor): their commits start --crowd-lead ahead.",
		}),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trigger_commit_errors_total",
			Help: "Store.Commit calls that failed; their jobs are retried with backoff.",
		}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trigger_fenced_total",
			Help: "Partitions a commit found owned by a newer epoch (this node stops firing them).",
		}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trigger_stale_total",
			Help: "Jobs whose compare-and-set failed at commit because their row changed since loading.",
		}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trigger_duplicate_slots_total",
			Help: "Slots a commit found already in the ledger.",
		}),
		loadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trigger_load_errors_total",
			Help: "Store.DueJobs calls that failed; retried at the next load.",
		}),
		planErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trigger_plan_errors_total",
			Help: "Due jobs left unfired because their stored definition could not be planned (bad schedule, time zone unknown here).",
		}),
		wholeReads: reads.WithLabelValues("whole"),
		sliceReads: reads.WithLabelValues("new_slots"),
		loadedRows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trigger_loaded_jobs_total",
			Help: "Job rows Store.DueJobs returned.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.lateness, slots, m.commitDuration, m.heapSize, m.crowds, m.commitErrors,
		m.fenced, m.stale, m.duplicates, m.loadErrors, m.planErrors, reads, m.loadedRows}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return metrics{}, fmt.Errorf("firing: register metrics: %w", err)
		}
	}
	return m, nil
}
