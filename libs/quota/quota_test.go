package quota_test

import (
	"flag"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/cronmesh/cronmesh/libs/quota"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	refusals, err := quota.NewRefusals(reg)
	require.NoError(t, err)
	q := quota.New("jobs", quota.Limits{Default: 10, Namespaces: quota.Overrides{"big": 100, "ops": 0}}, refusals)

	require.NoError(t, q.Check("alpha", 9, 1), "up to the limit")
	err = q.Check("alpha", 9, 2)
	var exceeded *quota.ExceededError
	require.ErrorAs(t, err, &exceeded)
	require.Equal(t, quota.ExceededError{Namespace: "alpha", Quota: "jobs", Limit: 10, Used: 9, Adding: 2}, *exceeded)
	require.NoError(t, q.Check("big", 99, 1), "an override raises the limit")
	require.Error(t, q.Check("big", 100, 1))
	require.NoError(t, q.Check("ops", 1_000_000, 1), "an override of 0 lifts it")
	require.Equal(t, 1.0, testutil.ToFloat64(refusals.Collector("alpha", "jobs")))
	require.Equal(t, 1.0, testutil.ToFloat64(refusals.Collector("big", "jobs")))

	var unlimited *quota.Quota
	require.NoError(t, unlimited.Check("alpha", 1_000_000, 1), "a nil Quota is unlimited")

	again, err := quota.NewRefusals(reg)
	require.NoError(t, err, "a second registration reuses the counter")
	again.Add("alpha", "jobs")
	require.Equal(t, 2.0, testutil.ToFloat64(refusals.Collector("alpha", "jobs")))
}

func TestConnectError(t *testing.T) {
	t.Parallel()
	err := (&quota.ExceededError{Namespace: "alpha", Quota: "jobs", Limit: 10, Used: 10, Adding: 1}).ConnectError()
	require.Equal(t, connect.CodeResourceExhausted, err.Code())
	require.Len(t, err.Details(), 1)
	v, derr := err.Details()[0].Value()
	require.NoError(t, derr)
	failure, ok := v.(*errdetails.QuotaFailure)
	require.True(t, ok, "a QuotaFailure detail, got %T", v)
	require.Equal(t, "namespace:alpha", failure.Violations[0].Subject)
	require.Contains(t, failure.Violations[0].Description, "quota jobs")
	require.Contains(t, failure.Violations[0].Description, "limit 10")
}

func TestOverridesFlag(t *testing.T) {
	t.Parallel()
	var o quota.Overrides
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.Var(&o, "max", "")
	require.NoError(t, fs.Parse([]string{"--max", "b=2, a=1,,"}))
	require.Equal(t, quota.Overrides{"a": 1, "b": 2}, o)
	require.Equal(t, "a=1,b=2", o.String())
	require.NoError(t, o.Set(""), "empty clears")
	require.Empty(t, o)
	for _, bad := range []string{"a", "a=-1", "a=x", "a=1,a=2", "=3"} {
		require.Error(t, o.Set(bad), bad)
	}
}
