package ring

import "github.com/prometheus/client_golang/prometheus"

// metrics are the ring's Prometheus instruments. They exist (unregistered)
// even without Options.Metrics, so the code never checks for nil.
type metrics struct {
	owned     prometheus.Gauge
	restarts  prometheus.Counter
	conflicts prometheus.Counter
	fenced    prometheus.Counter
}

func newMetrics() metrics {
	return metrics{
		owned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ring_owned_partitions",
			Help: "Partitions this node currently holds (ignoring the lease deadline).",
		}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ring_session_restarts_total",
			Help: "etcd sessions that ended, or failed to start, other than at shutdown (lost lease, passed deadline, etcd errors).",
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ring_acquire_conflicts_total",
			Help: "Attempts to acquire a partition whose owner key another node still held.",
		}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ring_fenced_total",
			Help: "Partitions dropped involuntarily: owner key taken away, lease lost or deadline passed.",
		}),
	}
}

func (m metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.owned, m.restarts, m.conflicts, m.fenced} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
