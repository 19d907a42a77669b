package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	benchreport "github.com/cronmesh/cronmesh/bench/internal/report"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
	"github.com/cronmesh/cronmesh/libs/rpcclient"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

// query measures ListExecutions through the service's API (Connect over
// h2c, one call at a time) on the loaded executions.
func query(ctx context.Context, out io.Writer, o options) error {
	if o.apiKey == "" {
		return errors.New("--api-key (CRONMESH_API_KEY) is required")
	}
	httpClient, err := rpcclient.NewHTTPClient(tlsconfig.Client{})
	if err != nil {
		return err
	}
	client := historyv1connect.NewHistoryServiceClient(httpClient, o.historyURL,
		connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Authorization", "Bearer "+o.apiKey)
				return next(ctx, req)
			}
		})))
	days, jobs := loadDays(o), loadJobs(o)
	rng := rand.New(rand.NewPCG(1, 2))
	measure := func(n int, req func() *historyv1.ListExecutionsRequest) ([]time.Duration, int, error) {
		lat := make([]time.Duration, 0, n)
		rows := 0
		for i := range n + 20 { // the first 20 warm up and are not counted
			r := req()
			t0 := time.Now()
			res, err := client.ListExecutions(ctx, connect.NewRequest(r))
			d := time.Since(t0)
			if err != nil {
				return nil, 0, err
			}
			if i >= 20 {
				lat = append(lat, d)
				rows += len(res.Msg.GetExecutions())
			}
		}
		slices.Sort(lat)
		return lat, rows, nil
	}
	dayWindow := func() (*timestamppb.Timestamp, *timestamppb.Timestamp) {
		d := days[rng.IntN(len(days))]
		return timestamppb.New(d), timestamppb.New(d.AddDate(0, 0, 1))
	}

	jobLat, jobRows, err := measure(o.samples, func() *historyv1.ListExecutionsRequest {
		s, e := dayWindow()
		return &historyv1.ListExecutionsRequest{JobId: jobs[rng.IntN(len(jobs))], StartTime: s, EndTime: e, PageSize: 50}
	})
	if err != nil {
		return fmt.Errorf("list by job and day: %w", err)
	}
	// Second pages of the same shape: the keyset cursor.
	pageLat, pageRows, err := measure(o.samples/4, func() *historyv1.ListExecutionsRequest {
		s, e := dayWindow()
		r := &historyv1.ListExecutionsRequest{JobId: jobs[rng.IntN(len(jobs))], StartTime: s, EndTime: e, PageSize: 50}
		res, err := client.ListExecutions(ctx, connect.NewRequest(r))
		if err == nil {
			r.PageToken = res.Msg.GetNextPageToken()
		}
		return r
	})
	if err != nil {
		return fmt.Errorf("list next page: %w", err)
	}
	terms := []struct{ name, query string }{
		{"common error (2% of rows)", "deadlock detected"},
		{"common reason (2.5% of rows)", "connection refused"},
		{"rare output (orders_<random>, mostly no row that day)", ""},
		{"absent", "no such text anywhere"},
	}
	fmt.Fprintf(out, "\n### Queries (ListExecutions through the API, Connect over h2c, one call at a time, page size 50, after 20 warm-up calls)\n\n")
	fmt.Fprintf(out, "| query | calls | p50 | p95 | p99 | max | mean rows |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	row := func(name string, lat []time.Duration, rows int) {
		fmt.Fprintf(out, "| %s | %d | %s | %s | %s | %s | %.1f |\n", name, len(lat), benchreport.Ms(benchreport.Quantile(lat, 0.5)), benchreport.Ms(benchreport.Quantile(lat, 0.95)),
			benchreport.Ms(benchreport.Quantile(lat, 0.99)), benchreport.Ms(lat[len(lat)-1]), float64(rows)/float64(len(lat)))
	}
	row("one job, one day (first page)", jobLat, jobRows)
	row("one job, one day (second page, by token)", pageLat, pageRows)
	var allSearch []time.Duration
	for _, term := range terms {
		lat, rows, err := measure(o.searchSamples/len(terms), func() *historyv1.ListExecutionsRequest {
			s, e := dayWindow()
			q := term.query
			if q == "" {
				q = fmt.Sprintf("orders_%d", rng.IntN(100000))
			}
			return &historyv1.ListExecutionsRequest{Query: q, StartTime: s, EndTime: e, PageSize: 50}
		})
		if err != nil {
			return fmt.Errorf("search %q: %w", term.name, err)
		}
		row("text search over a day: "+term.name, lat, rows)
		allSearch = append(allSearch, lat...)
	}
	slices.Sort(allSearch)
	fmt.Fprintf(out, "\n- %s ListExecutions for one job and a day under 50 ms p99: p99 %s\n", verdict(benchreport.Quantile(jobLat, 0.99) < 50*time.Millisecond), benchreport.Ms(benchreport.Quantile(jobLat, 0.99)))
	fmt.Fprintf(out, "- %s text search over a day under 500 ms: p99 %s over all %d searches\n", verdict(benchreport.Quantile(allSearch, 0.99) < 500*time.Millisecond), benchreport.Ms(benchreport.Quantile(allSearch, 0.99)), len(allSearch))
	loadNow(out, "after the queries")
	return nil
}
