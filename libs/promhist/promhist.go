// Package promhist reads Prometheus histograms and counters from running
// processes' /metrics endpoints, for the benchmarks, and turns two
// readings of a histogram into quantile bounds: the quantile of what a
// service observed between two moments is known only to its bucket, so it
// is reported as that bucket's bound.
package promhist

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Histogram is the cumulative count of every bucket of one histogram, by
// upper bound (+Inf included), summed over its label sets and processes.
// It is empty when no process exports the histogram.
type Histogram map[float64]float64

// Scrape reads the histogram name from the /metrics of every base URL
// ("http://127.0.0.1:8083") and sums them. A process that cannot be read
// or parsed is skipped, and its error returned joined with the others,
// next to the sum of the rest.
func Scrape(ctx context.Context, baseURLs []string, name string) (Histogram, error) {
	h := Histogram{}
	var errs []error
	for _, u := range baseURLs {
		if err := h.add(ctx, u, name); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", u, err))
		}
	}
	return h, errors.Join(errs...)
}

func (h Histogram) add(ctx context.Context, baseURL, name string) error {
	families, err := read(ctx, baseURL)
	if err != nil {
		return err
	}
	for _, m := range families[name].GetMetric() {
		for _, b := range m.GetHistogram().GetBucket() {
			h[b.GetUpperBound()] += float64(b.GetCumulativeCount())
		}
	}
	return nil
}

// ScrapeCounters reads the counters names from the /metrics of every base
// URL, each process once, and sums each by the value of its label by:
// sums[name][v] is the sum of the series of counter name whose label by
// has the value v ("" for series without it, and for every series when by
// is ""). A process that cannot be read or parsed is skipped, as by
// [Scrape]. A counter no process exports has no entry.
func ScrapeCounters(ctx context.Context, baseURLs []string, by string, names ...string) (map[string]map[string]float64, error) {
	sums := map[string]map[string]float64{}
	var errs []error
	for _, u := range baseURLs {
		families, err := read(ctx, u)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", u, err))
			continue
		}
		for _, name := range names {
			for _, m := range families[name].GetMetric() {
				v := ""
				for _, l := range m.GetLabel() {
					if by != "" && l.GetName() == by {
						v = l.GetValue()
					}
				}
				if sums[name] == nil {
					sums[name] = map[string]float64{}
				}
				sums[name][v] += m.GetCounter().GetValue()
			}
		}
	}
	return sums, errors.Join(errs...)
}

// read fetches and parses the /metrics of baseURL.
func read(ctx context.Context, baseURL string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics answered %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	return families, nil
}

// QuantileBound returns the upper bound of the bucket holding the
// q-quantile of the observations made between the readings before and
// after (+Inf when it is in the last bucket), and how many observations
// there were. With none, the bound is NaN.
func QuantileBound(before, after Histogram, q float64) (bound, count float64) {
	bounds := make([]float64, 0, len(after))
	for ub := range after {
		bounds = append(bounds, ub)
	}
	slices.Sort(bounds)
	if len(bounds) == 0 {
		return math.NaN(), 0
	}
	last := bounds[len(bounds)-1]
	count = after[last] - before[last]
	if count <= 0 {
		return math.NaN(), 0
	}
	for _, ub := range bounds {
		if after[ub]-before[ub] >= q*count {
			return ub, count
		}
	}
	return last, count
}

// ShareAtMost returns the share of the observations made between the
// readings before and after that were at most bound, and how many there
// were. Exact, unlike a quantile, when bound is one of the histogram's
// bucket bounds (a target such as "99 % within 100 ms" read off the 0.1
// bucket); for any other bound, and with no observations, the share is
// NaN.
func ShareAtMost(before, after Histogram, bound float64) (share, count float64) {
	count = after[math.Inf(1)] - before[math.Inf(1)] // every histogram has the +Inf bucket
	atMost, ok := after[bound]
	if !ok || count <= 0 {
		return math.NaN(), count
	}
	return (atMost - before[bound]) / count, count
}

// BelowLast returns the highest finite bound of h: what a quantile in the
// +Inf bucket is known to exceed. NaN when h has no finite bound.
func BelowLast(h Histogram) float64 {
	highest := math.NaN()
	for ub := range h {
		if !math.IsInf(ub, 1) && (math.IsNaN(highest) || ub > highest) {
			highest = ub
		}
	}
	return highest
}
