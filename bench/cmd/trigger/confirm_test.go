package main

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	benchreport "github.com/cronmesh/cronmesh/bench/internal/report"
)

// serveConfirms exports confirmHistogram with the relay's buckets, as a
// node does, and returns the node and the histogram.
func serveConfirms(t *testing.T) (*node, prometheus.Histogram) {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: confirmHistogram, Help: "h",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .075, .1, .15, .25, .5, 1, 2.5, 5, 10, 30, 60}})
	reg.MustRegister(h)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return &node{id: "n", addr: strings.TrimPrefix(srv.URL, "http://")}, h
}

func TestConfirmsInTheLatenessTable(t *testing.T) {
	t.Parallel()
	n1, h1 := serveConfirms(t)
	n2, h2 := serveConfirms(t)
	e := &env{nodes: []*node{n1, n2}}
	h1.Observe(.5) // before the window: not counted
	c := readConfirms(t.Context(), e)
	for range 980 {
		h1.Observe(.02)
	}
	for range 18 {
		h2.Observe(.1) // within 100 ms: the bucket's bound is in it
	}
	h2.Observe(.12)
	h2.Observe(90)
	c.end(t.Context(), e)

	var r report
	r.latenessTable(dist{}, dist{}, c)
	out := r.String()
	require.Contains(t, out, "| nominal → broker confirm (trigger's histogram, bucket bound) | 1,000 | ≤ 25.0 ms | ≤ 25.0 ms | ≤ 100 ms | ≤ 150 ms | > 60000 ms |")
	require.Contains(t, out, "**99.80 % ≤ 100 ms** of 1,000 slots")
	require.Equal(t, "> 60.00 s", c.bound(1, benchreport.Secs))

	nobody := &env{nodes: []*node{{id: "gone", addr: "127.0.0.1:1"}}}
	gone := readConfirms(t.Context(), nobody)
	gone.end(t.Context(), nobody)
	var r2 report
	r2.latenessTable(dist{}, dist{}, gone)
	require.Contains(t, r2.String(), "| nominal → broker confirm (trigger's histogram, bucket bound) | 0 | - | - | - | - | - |")
	require.Contains(t, r2.String(), "could not be read")
}
