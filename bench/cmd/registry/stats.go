package main

import (
	"fmt"
	"slices"
	"time"
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
	rank := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
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

// ms renders a duration in milliseconds with a precision that suits it.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	default:
		return fmt.Sprintf("%.2f ms", v)
	}
}

// rate renders a per-second rate with thousands separators.
func rate(n float64) string {
	return thousands(int64(n + 0.5))
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	out := make([]byte, 0, len(s)+len(s)/3)
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// bytesIEC renders a size in MiB or GiB.
func bytesIEC(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
