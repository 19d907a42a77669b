// Package promhist reads Prometheus histograms from running processes'
// /metrics endpoints and turns two readings into quantile bounds, for the
// benchmarks: the quantile of what a service observed between two moments
// is known only to its bucket, so it is reported as that bucket's bound.
package promhist

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"

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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/metrics answered %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return fmt.Errorf("parse /metrics: %w", err)
	}
	for _, m := range families[name].GetMetric() {
		for _, b := range m.GetHistogram().GetBucket() {
			h[b.GetUpperBound()] += float64(b.GetCumulativeCount())
		}
	}
	return nil
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
