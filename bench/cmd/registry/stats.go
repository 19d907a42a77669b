package main

import (
	"slices"
	"time"

	"github.com/cronmesh/cronmesh/bench/internal/report"
)

// summary is the distribution of a set of latencies. Percentiles are exact
// (nearest rank over the sorted samples) rather than from a histogram: no
// run here keeps more than a few hundred thousand samples.
type summary struct {
	count                         int
	mean, p50, p90, p99, p999, mx time.Duration
}

func summarize(samples []time.Duration) summary {
	if len(samples) == 0 {
		return summary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	var total time.Duration
	for _, d := range s {
		total += d
	}
	rank := func(q float64) time.Duration { return report.Quantile(s, q) }
	return summary{
		count: len(s),
		mean:  total / time.Duration(len(s)),
		p50:   rank(0.50),
		p90:   rank(0.90),
		p99:   rank(0.99),
		p999:  rank(0.999),
		mx:    s[len(s)-1],
	}
}
