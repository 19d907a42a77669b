package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/quota"
	"github.com/cronmesh/cronmesh/libs/ratelimit"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
	"github.com/cronmesh/cronmesh/services/registry/internal/app"
)

// requireQuotaFailure asserts err is RESOURCE_EXHAUSTED with a QuotaFailure
// naming namespace and the jobs quota.
func requireQuotaFailure(t *testing.T, err error, namespace string) {
	t.Helper()
	cerr := rpctest.RequireCode(t, err, connect.CodeResourceExhausted)
	for _, d := range cerr.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		if qf, ok := v.(*errdetails.QuotaFailure); ok {
			require.Equal(t, "namespace:"+namespace, qf.Violations[0].Subject)
			require.Contains(t, qf.Violations[0].Description, "quota jobs")
			return
		}
	}
	t.Fatalf("RESOURCE_EXHAUSTED without a QuotaFailure detail: %v", err)
}

// get fetches path from the registry's listener without a key.
func (r *registry) get(t *testing.T, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, r.baseURL+path, nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body)
}

func (r *registry) countJobs(t *testing.T, namespace string) int {
	t.Helper()
	var n int
	require.NoError(t, r.app.Pool().QueryRow(context.Background(), `SELECT count(*) FROM jobs WHERE namespace = $1`, namespace).Scan(&n))
	return n
}

func TestMaxJobsPerNamespace(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t, withMaxJobs(quota.Limits{Default: 3, Namespaces: quota.Overrides{"beta": 5}}))
	ctx := context.Background()
	alpha := reg.client(keyAlpha)

	var first *registryv1.Job
	for i := range 3 {
		res, err := alpha.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob(fmt.Sprint("job-", i)), RequestId: fmt.Sprint("r-", i)}))
		require.NoError(t, err, "job %d of 3", i+1)
		if first == nil {
			first = res.Msg.Job
		}
	}
	for _, p := range rpctest.Protocols() {
		_, err := reg.client(keyAlpha, p.Opts...).CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob("one-too-many")}))
		requireQuotaFailure(t, err, "alpha")
	}
	replay, err := alpha.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob("job-0"), RequestId: "r-0"}))
	require.NoError(t, err, "a replay at the quota takes no room")
	require.Equal(t, first.Id, replay.Msg.Job.Id)

	// beta's override, and a batch that would cross it is refused whole.
	beta := reg.client(keyBeta)
	batch := func(n int) *registryv1.BatchCreateJobsRequest {
		req := &registryv1.BatchCreateJobsRequest{}
		for i := range n {
			req.Requests = append(req.Requests, &registryv1.CreateJobRequest{Job: httpJob(fmt.Sprint("b-", i))})
		}
		return req
	}
	_, err = beta.BatchCreateJobs(ctx, connect.NewRequest(batch(4)))
	require.NoError(t, err)
	_, err = beta.BatchCreateJobs(ctx, connect.NewRequest(batch(2)))
	requireQuotaFailure(t, err, "beta")
	require.Equal(t, 4, reg.countJobs(t, "beta"), "nothing of the refused batch was written")
	_, err = beta.BatchCreateJobs(ctx, connect.NewRequest(batch(1)))
	require.NoError(t, err, "the last one fits")

	// Deleting a job makes room for another.
	_, err = alpha.DeleteJob(ctx, connect.NewRequest(&registryv1.DeleteJobRequest{Id: first.Id}))
	require.NoError(t, err)
	_, err = alpha.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob("after-delete")}))
	require.NoError(t, err)
	require.Equal(t, 3, reg.countJobs(t, "alpha"))
	require.Len(t, reg.nextEvents(t, 3+5+1+1), 10, "refused creates published nothing")
	reg.requireNoMoreEvents(t)

	code, body := reg.get(t, "/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `quota_refusals_total{namespace="alpha",quota="jobs"} 2`)
	require.Contains(t, body, `quota_refusals_total{namespace="beta",quota="jobs"} 1`)
}

func TestMaxJobsHoldsUnderConcurrentCreates(t *testing.T) {
	t.Parallel()
	const limit, callers = 7, 24
	reg := startRegistry(t, withMaxJobs(quota.Limits{Default: limit}))
	ctx := context.Background()
	alpha := reg.client(keyAlpha)

	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		created, refused int
		unexpected       []error
	)
	for i := range callers {
		wg.Go(func() {
			var err error
			if i%3 == 0 {
				_, err = alpha.BatchCreateJobs(ctx, connect.NewRequest(&registryv1.BatchCreateJobsRequest{Requests: []*registryv1.CreateJobRequest{
					{Job: httpJob(fmt.Sprint("batch-", i, "-a"))}, {Job: httpJob(fmt.Sprint("batch-", i, "-b"))},
				}}))
			} else {
				_, err = alpha.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob(fmt.Sprint("single-", i))}))
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case connect.CodeOf(err) == connect.CodeResourceExhausted:
				refused++
			default:
				unexpected = append(unexpected, err)
			}
		})
	}
	wg.Wait()
	require.Empty(t, unexpected)
	require.Equal(t, callers, created+refused)
	require.NotZero(t, refused)
	// Exactly the limit: never more, and not less since the sixteen single
	// creates cannot all have been refused before the last room was taken.
	require.Equal(t, limit, reg.countJobs(t, "alpha"), "concurrent creates fill the quota and never overshoot it")
}

func TestRateLimitPerKey(t *testing.T) {
	t.Parallel()
	// One request, then one every thousand seconds: the next is refused
	// however slowly the test runs.
	reg := startRegistry(t, func(c *app.Config) {
		c.RateLimit = ratelimit.Config{Default: ratelimit.Rate{PerSecond: 0.001, Burst: 1}}
	})
	ctx := context.Background()
	list := connect.NewRequest(&registryv1.ListJobsRequest{})
	_, err := reg.client(keyAlpha).ListJobs(ctx, list)
	require.NoError(t, err, "the burst of one")
	for _, p := range rpctest.Protocols() {
		_, err := reg.client(keyAlpha, p.Opts...).ListJobs(ctx, list)
		cerr := rpctest.RequireCode(t, err, connect.CodeResourceExhausted)
		var retry *errdetails.RetryInfo
		for _, d := range cerr.Details() {
			if v, derr := d.Value(); derr == nil {
				if r, ok := v.(*errdetails.RetryInfo); ok {
					retry = r
				}
			}
		}
		require.NotNil(t, retry, "%s: a RetryInfo detail", p.Name)
		require.Greater(t, retry.RetryDelay.AsDuration(), 900*time.Second, p.Name)
	}
	_, err = reg.client(keyBeta).ListJobs(ctx, list)
	require.NoError(t, err, "beta's key has a bucket of its own")

	code, body := reg.get(t, "/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `quota_refusals_total{namespace="alpha",quota="requests_per_second"} 2`)
	require.NotContains(t, body, `quota_refusals_total{namespace="beta"`)
}
