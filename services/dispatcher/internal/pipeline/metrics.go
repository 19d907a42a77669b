package pipeline

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of a Pipeline.
type metrics struct {
	deliveries       *prometheus.CounterVec
	duration         *prometheus.HistogramVec
	startDelay       prometheus.Histogram
	inFlight         prometheus.Gauge
	retries          *prometheus.CounterVec
	deadLetters      prometheus.Counter
	cancelled        prometheus.Counter
	deadlineExceeded prometheus.Counter
	events           prometheus.Counter
	eventBatches     prometheus.Counter
	publishFailures  *prometheus.CounterVec
	poison           prometheus.Counter
	cancelErrors     prometheus.Counter
	requeued         prometheus.Counter
	duplicates       prometheus.Counter
	lookUpsSkipped   prometheus.Counter
	recordErrors     prometheus.Counter
	unrecorded       prometheus.Gauge
	unrecordedDrops  prometheus.Counter
	batchRequests    prometheus.Histogram
	overlap          *prometheus.CounterVec
	overlapErrors    prometheus.Counter
	promoted         prometheus.Counter
	staleReleases    prometheus.Counter
	all              []prometheus.Collector
}

func newMetrics() metrics {
	m := metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "deliveries_total",
			Help: "Delivery attempts made, by priority and result (succeeded, retryable, permanent).",
		}, []string{"priority", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "delivery_duration_seconds",
			Help:    "How long delivery attempts took, by result.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"result"}),
		startDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "delivery_start_delay_seconds",
			Help: "From a worker taking a dispatch message to its delivery attempt starting: the dispatcher's own share of the way from the queue to the target.",
			// Fine below 10 ms, where the latency target is.
			Buckets: []float64{.00025, .0005, .001, .002, .003, .004, .005, .0075, .01, .015, .02, .03, .05, .1, .25, .5, 1},
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "deliveries_in_flight",
			Help: "Delivery attempts under way.",
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "retries_scheduled_total",
			Help: "Retries parked in a delay tier, by tier.",
		}, []string{"tier"}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dead_letters_total",
			Help: "Executions sent to the dead-letter queue (permanent failure or retries exhausted).",
		}),
		cancelled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "executions_cancelled_total",
			Help: "Dispatch requests of cancelled executions: dropped before delivery, or aborted in flight.",
		}),
		deadlineExceeded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "deadline_exceeded_total",
			Help: "Dispatch requests dead-lettered without an attempt because their execution's deadline (or, for a retry, the job's next slot) had passed; retries not scheduled for it count in dead_letters_total only.",
		}),
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "events_published_total",
			Help: "Lifecycle events published (confirmed by the broker).",
		}),
		eventBatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "event_batches_published_total",
			Help: "Broker messages carrying lifecycle events (ExecutionEventBatch).",
		}),
		publishFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "publish_failures_total",
			Help: "Publishes that failed (the dispatch message is requeued), by what was published: retry, dead, events, promoted.",
		}, []string{"what"}),
		poison: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "poison_messages_total",
			Help: "Dispatch messages that do not decode to a valid request, acknowledged and dropped.",
		}),
		cancelErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cancellation_check_errors_total",
			Help: "Look-ups before delivery (cancelled? completed already?) that failed; the request was delivered.",
		}),
		requeued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatch_requeued_total",
			Help: "Dispatch messages negatively acknowledged for redelivery (a publish failed, or shutdown interrupted them).",
		}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "duplicates_skipped_total",
			Help: "Redelivered dispatch requests not delivered because their attempt (or a later one) had completed.",
		}),
		lookUpsSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lookups_skipped_total",
			Help: "Dispatch requests delivered without the completed/cancelled look-up: first publishes of a slot's first attempt, delivered for the first time.",
		}),
		recordErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "completion_record_errors_total",
			Help: "Failed attempts to record completed attempts (they are held in memory and recorded again; see completions_unrecorded).",
		}),
		unrecorded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "completions_unrecorded",
			Help: "Completed attempts held in memory because recording them failed; redeliveries of them are still skipped.",
		}),
		unrecordedDrops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "completions_unrecorded_dropped_total",
			Help: "Completed attempts neither recorded nor held (the in-memory hold was full): a redelivery of them would be delivered again.",
		}),
		batchRequests: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dispatch_batch_requests",
			Help:    "Dispatch requests per packed broker message (the trigger's relay packs the requests it publishes together).",
			Buckets: []float64{2, 4, 8, 16, 32, 64, 128},
		}),
		overlap: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overlap_decisions_total",
			Help: "First attempts of executions with an overlap policy other than ALLOW, by what the policy made of them: admitted, skipped, buffered, already_buffered, cancelled_other.",
		}, []string{"decision"}),
		overlapErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overlap_errors_total",
			Help: "Overlap policy checks (the request is requeued) and releases (retried by the sweep) that failed.",
		}),
		promoted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overlap_promoted_published_total",
			Help: "Buffered executions published to the dispatch exchange once the execution they waited for ended (a republish by the sweep counts again).",
		}),
		staleReleases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overlap_stale_releases_total",
			Help: "Active executions released by the sweep because they held their job past their bound (their end was never seen).",
		}),
	}
	m.all = []prometheus.Collector{m.deliveries, m.duration, m.startDelay, m.inFlight, m.retries, m.deadLetters, m.cancelled, m.deadlineExceeded,
		m.events, m.eventBatches, m.publishFailures, m.poison, m.cancelErrors, m.requeued, m.duplicates, m.lookUpsSkipped, m.recordErrors,
		m.unrecorded, m.unrecordedDrops, m.batchRequests, m.overlap, m.overlapErrors, m.promoted, m.staleReleases}
	return m
}

// register registers every collector on reg (none when reg is nil).
func register(reg prometheus.Registerer, collectors []prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	return nil
}
