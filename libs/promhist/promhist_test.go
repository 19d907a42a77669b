package promhist_test

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/promhist"
)

// serve exports a histogram with buckets 0.01, 0.1, 1 and one label, as a
// service does, and returns its base URL and the histogram.
func serve(t *testing.T) (string, *prometheus.HistogramVec) {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "delay_seconds", Help: "h", Buckets: []float64{.01, .1, 1}}, []string{"kind"})
	reg.MustRegister(h)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return srv.URL, h
}

func TestScrapeAndQuantileBound(t *testing.T) {
	t.Parallel()
	a, ha := serve(t)
	b, hb := serve(t)
	ha.WithLabelValues("x").Observe(5) // before the first reading: not counted
	before, err := promhist.Scrape(t.Context(), []string{a, b}, "delay_seconds")
	require.NoError(t, err)

	for range 90 {
		ha.WithLabelValues("x").Observe(.005)
	}
	for range 9 {
		hb.WithLabelValues("y").Observe(.05)
	}
	hb.WithLabelValues("x").Observe(3)
	after, err := promhist.Scrape(t.Context(), []string{a, b}, "delay_seconds")
	require.NoError(t, err)

	bound, n := promhist.QuantileBound(before, after, .5)
	require.Equal(t, .01, bound)
	require.EqualValues(t, 100, n, "summed over label sets and processes, since the first reading")
	bound, _ = promhist.QuantileBound(before, after, .99)
	require.Equal(t, .1, bound)
	bound, _ = promhist.QuantileBound(before, after, 1)
	require.True(t, math.IsInf(bound, 1), "the last observation is past every finite bucket")
	require.Equal(t, 1.0, promhist.BelowLast(after))
}

func TestScrapeWithoutTheHistogramOrTheProcess(t *testing.T) {
	t.Parallel()
	a, _ := serve(t)
	h, err := promhist.Scrape(t.Context(), []string{a}, "absent_seconds")
	require.NoError(t, err)
	require.Empty(t, h, "not exported: empty")
	bound, n := promhist.QuantileBound(h, h, .5)
	require.True(t, math.IsNaN(bound))
	require.Zero(t, n)

	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	_, err = promhist.Scrape(t.Context(), []string{gone.URL}, "delay_seconds")
	require.Error(t, err)
}

func TestShareAtMost(t *testing.T) {
	t.Parallel()
	a, ha := serve(t)
	b, hb := serve(t)
	ha.WithLabelValues("x").Observe(.5) // before the first reading: not counted
	before, err := promhist.Scrape(t.Context(), []string{a, b}, "delay_seconds")
	require.NoError(t, err)
	for range 196 {
		ha.WithLabelValues("x").Observe(.05)
	}
	hb.WithLabelValues("y").Observe(.1) // a bucket's bound is within it
	hb.WithLabelValues("y").Observe(.2)
	hb.WithLabelValues("y").Observe(.3)
	hb.WithLabelValues("x").Observe(5)
	after, err := promhist.Scrape(t.Context(), []string{a, b}, "delay_seconds")
	require.NoError(t, err)

	tests := []struct {
		name  string
		bound float64
		want  float64
	}{
		{"first bucket", .01, 0},
		{"a middle bucket", .1, .985},
		{"the last finite bucket", 1, .995},
		{"+Inf", math.Inf(1), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			share, n := promhist.ShareAtMost(before, after, tt.bound)
			require.InDelta(t, tt.want, share, 1e-12)
			require.EqualValues(t, 200, n)
		})
	}
	share, n := promhist.ShareAtMost(before, after, .5)
	require.True(t, math.IsNaN(share), "not a bucket's bound: unknown")
	require.EqualValues(t, 200, n)
	share, n = promhist.ShareAtMost(after, after, .1)
	require.True(t, math.IsNaN(share), "no observations")
	require.Zero(t, n)
}

// serveCounter exports a counter with the label kind, and one without
// labels, as a service does, and returns its base URL and both.
func serveCounter(t *testing.T) (string, *prometheus.CounterVec, prometheus.Counter) {
	t.Helper()
	reg := prometheus.NewRegistry()
	byKind := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slots_total", Help: "c"}, []string{"kind"})
	plain := prometheus.NewCounter(prometheus.CounterOpts{Name: "published_total", Help: "c"})
	reg.MustRegister(byKind, plain)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return srv.URL, byKind, plain
}

func TestScrapeCounters(t *testing.T) {
	t.Parallel()
	a, kindsA, plainA := serveCounter(t)
	b, kindsB, plainB := serveCounter(t)
	kindsA.WithLabelValues("scheduled").Add(3)
	kindsA.WithLabelValues("missed").Add(1)
	kindsB.WithLabelValues("scheduled").Add(4)
	kindsB.WithLabelValues("catch_up").Add(2)
	plainA.Add(5)
	plainB.Add(6)

	got, err := promhist.ScrapeCounters(t.Context(), []string{a, b}, "kind", "slots_total", "published_total", "absent_total")
	require.NoError(t, err)
	require.Equal(t, map[string]map[string]float64{
		"slots_total":     {"scheduled": 7, "catch_up": 2, "missed": 1}, // summed per label value over processes
		"published_total": {"": 11},                                     // a series without the label: the empty value
	}, got, "a counter nobody exports has no entry")

	whole, err := promhist.ScrapeCounters(t.Context(), []string{a, b}, "", "slots_total")
	require.NoError(t, err)
	require.Equal(t, map[string]float64{"": 10}, whole["slots_total"], "no label named: every series in one sum")

	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	partial, err := promhist.ScrapeCounters(t.Context(), []string{a, gone.URL}, "", "published_total")
	require.Error(t, err, "a process that cannot be read is reported")
	require.Equal(t, map[string]float64{"": 5}, partial["published_total"], "next to the sum of the others")
}
