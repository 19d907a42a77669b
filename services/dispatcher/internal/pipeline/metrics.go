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
	hold             prometheus.Histogram
	holdsCapped      prometheus.Counter
	inFlight         prometheus.Gauge
	retries          *prometheus.CounterVec
	deadLetters      prometheus.Counter
	cancelled        prometheus.Counter
	deadlineExceeded prometheus.Counter
	events           prometheus.Counter
	startedEvents    prometheus.Counter
	eventBatches     prometheus.Counter
	eventsHeld       prometheus.Histogram
	slotWaiters      prometheus.Gauge
	publishFailures  *prometheus.CounterVec
	poison           prometheus.Counter
	cancelErrors     prometheus.Counter
	requeued         prometheus.Counter
	duplicates       prometheus.Counter
	lookUpsSkipped   prometheus.Counter
	recordErrors     prometheus.Counter
	unrecorded       prometheus.Gauge
	unrecordedDrops  prometheus.Counter
	unsettled        prometheus.Gauge
	unsettledDrops   prometheus.Counter
	resettled        prometheus.Counter
	batchRequests    prometheus.Histogram
	overlap          *prometheus.CounterVec
	overlapErrors    prometheus.Counter
	promoted         prometheus.Counter
	staleReleases    prometheus.Counter
	all              []prometheus.Collector
}

func newMetrics() metrics {
	m := metrics{
		deliveries: counterVec("deliveries_total",
			"Delivery attempts made, by priority and result (succeeded, retryable, permanent).", []string{"priority", "result"}),
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
		hold: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "dispatch_hold_seconds",
			Help: "For requests the trigger fired ahead of their slot (not_before set): how long before it the dispatcher took them, the time it held them (0: taken at or after their slot).",
			// The trigger's --lead is 0.5 s by default: a large share near
			// 0 says the way from commit to dispatcher takes all of it.
			Buckets: []float64{0, .01, .025, .05, .1, .2, .3, .4, .5, .75, 1, 2, 5},
		}),
		holdsCapped: counter("dispatch_holds_capped_total",
			"Requests whose not_before was further ahead than --max-hold (the trigger's clock and this host's disagree): delivered that much before it."),
		inFlight: gauge("deliveries_in_flight",
			"Delivery attempts under way."),
		retries: counterVec("retries_scheduled_total",
			"Retries parked in a delay tier, by tier.", []string{"tier"}),
		deadLetters: counter("dead_letters_total",
			"Executions sent to the dead-letter queue (permanent failure or retries exhausted)."),
		cancelled: counter("executions_cancelled_total",
			"Dispatch requests of cancelled executions: dropped before delivery, or aborted in flight."),
		deadlineExceeded: counter("deadline_exceeded_total",
			"Dispatch requests dead-lettered without an attempt because their execution's deadline (or, for a retry, the job's next slot) had passed; retries not scheduled for it count in dead_letters_total only."),
		events: counter("events_published_total",
			"Lifecycle events published (confirmed by the broker)."),
		startedEvents: counter("started_events_total",
			"STARTED events emitted: one per attempt with Options.StartedEventAfter zero, else one per attempt still running after it (compare with deliveries_total)."),
		eventsHeld: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "event_batch_held_seconds",
			Help:    "How long each batch of lifecycle events was held back while requests waited for a delivery slot (--event-hold); 0 for most.",
			Buckets: []float64{0, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		slotWaiters: gauge("delivery_slot_waiters",
			"Requests whose delivery waits for a slot (--workers-*): a crowd of slots being delivered, or slow targets holding the slots."),
		eventBatches: counter("event_batches_published_total",
			"Broker messages carrying lifecycle events (ExecutionEventBatch)."),
		publishFailures: counterVec("publish_failures_total",
			"Publishes that failed (the dispatch message is requeued), by what was published: retry, dead, events, promoted.", []string{"what"}),
		poison: counter("poison_messages_total",
			"Dispatch messages that do not decode to a valid request, acknowledged and dropped."),
		cancelErrors: counter("cancellation_check_errors_total",
			"Look-ups before delivery (cancelled? completed already?) that failed: a retry was then delivered, a possible second copy (redelivered, or flagged by the trigger's relay) asked again after a backoff."),
		requeued: counter("dispatch_requeued_total",
			"Dispatch messages negatively acknowledged for redelivery (a publish failed, or shutdown interrupted them)."),
		duplicates: counter("duplicates_skipped_total",
			"Redelivered dispatch requests not delivered because their attempt (or a later one) had completed."),
		lookUpsSkipped: counter("lookups_skipped_total",
			"Dispatch requests delivered without the completed/cancelled look-up: first publishes of a slot's first attempt, delivered for the first time."),
		recordErrors: counter("completion_record_errors_total",
			"Failed attempts to record completed attempts (they are held in memory and recorded again; see completions_unrecorded)."),
		unrecorded: gauge("completions_unrecorded",
			"Completed attempts held in memory because recording them failed; redeliveries of them are still skipped."),
		unrecordedDrops: counter("completions_unrecorded_dropped_total",
			"Completed attempts neither recorded nor held (the in-memory hold was full): a redelivery of them would be delivered again."),
		unsettled: gauge("attempts_unsettled",
			"Attempts made whose consequences (events, retry or dead letter) are not all confirmed yet, kept so that a redelivery publishes them again instead of attempting again."),
		unsettledDrops: counter("attempts_unsettled_dropped_total",
			"Attempts whose consequences could not be kept for a redelivery (the memory budget was spent): a redelivery of them is attempted again."),
		resettled: counter("attempts_settled_again_total",
			"Redelivered dispatch requests not attempted again because this dispatcher had made the attempt: what it caused was published again instead."),
		batchRequests: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dispatch_batch_requests",
			Help:    "Dispatch requests per packed broker message (the trigger's relay packs the requests it publishes together).",
			Buckets: []float64{2, 4, 8, 16, 32, 64, 128},
		}),
		overlap: counterVec("overlap_decisions_total",
			"First attempts of executions with an overlap policy other than ALLOW, by what the policy made of them: admitted, skipped, buffered, already_buffered, cancelled_other.", []string{"decision"}),
		overlapErrors: counter("overlap_errors_total",
			"Overlap policy checks (the request is requeued) and releases (retried by the sweep) that failed."),
		promoted: counter("overlap_promoted_published_total",
			"Buffered executions published to the dispatch exchange once the execution they waited for ended (a republish by the sweep counts again)."),
		staleReleases: counter("overlap_stale_releases_total",
			"Active executions released by the sweep because they held their job past their bound (their end was never seen)."),
	}
	m.all = []prometheus.Collector{m.deliveries, m.duration, m.startDelay, m.hold, m.holdsCapped, m.inFlight, m.retries, m.deadLetters, m.cancelled, m.deadlineExceeded,
		m.events, m.startedEvents, m.eventBatches, m.eventsHeld, m.slotWaiters, m.publishFailures, m.poison, m.cancelErrors, m.requeued, m.duplicates, m.lookUpsSkipped, m.recordErrors,
		m.unrecorded, m.unrecordedDrops, m.unsettled, m.unsettledDrops, m.resettled, m.batchRequests, m.overlap, m.overlapErrors, m.promoted, m.staleReleases}
	return m
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counterVec(name, help string, labels []string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
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
