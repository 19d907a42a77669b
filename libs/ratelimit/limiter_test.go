package ratelimit_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/keyring"
	"github.com/cronmesh/cronmesh/libs/quota"
	"github.com/cronmesh/cronmesh/libs/ratelimit"
)

const (
	keyA = "alpha-key-a-0123456789abcdef"
	keyB = "alpha-key-b-0123456789abcdef"
)

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func principal(ns, keyID string) apikey.Principal {
	return apikey.Principal{Namespace: ns, KeyID: keyID, Role: apikey.RoleEditor}
}

// serve runs a unary handler behind the API key middleware and the
// limiter's interceptor, as libs/server mounts every service, and returns
// a client of it calling with key.
func serve(t *testing.T, l *ratelimit.Limiter, opts ...connect.ClientOption) func(key string) error {
	t.Helper()
	keys, err := keyring.Config{}.NewRegistryRing([]string{"alpha=" + keyA, "alpha=" + keyB}, nil, nil, nil)
	require.NoError(t, err)
	const procedure = "/cronmesh.test.v1.PingService/Ping"
	mux := http.NewServeMux()
	mux.Handle(procedure, connect.NewUnaryHandler(procedure,
		func(context.Context, *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
			return connect.NewResponse(&emptypb.Empty{}), nil
		}, connect.WithInterceptors(l.Interceptor())))
	srv := httptest.NewUnstartedServer(keys.Middleware().Wrap(mux))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	transport := &http.Transport{Protocols: new(http.Protocols)}
	transport.Protocols.SetUnencryptedHTTP2(true)
	client := connect.NewClient[emptypb.Empty, emptypb.Empty](&http.Client{Transport: transport}, srv.URL+procedure, opts...)
	return func(key string) error {
		req := connect.NewRequest(&emptypb.Empty{})
		req.Header().Set("Authorization", "Bearer "+key)
		_, err := client.CallUnary(context.Background(), req)
		return err
	}
}

func TestRefusesBeyondBurstWithRetryDelayThenAdmits(t *testing.T) {
	t.Parallel()
	for _, protocol := range []struct {
		name string
		opts []connect.ClientOption
	}{{"connect", nil}, {"grpc", []connect.ClientOption{connect.WithGRPC()}}} {
		t.Run(protocol.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			reg := prometheus.NewRegistry()
			refusals, err := quota.NewRefusals(reg)
			require.NoError(t, err)
			l, err := ratelimit.New(ratelimit.Config{Default: ratelimit.Rate{PerSecond: 2, Burst: 3}},
				ratelimit.Options{Clock: clk, Refusals: refusals})
			require.NoError(t, err)
			call := serve(t, l, protocol.opts...)

			for i := range 3 {
				require.NoError(t, call(keyA), "request %d of the burst", i+1)
			}
			err = call(keyA)
			var cerr *connect.Error
			require.True(t, errors.As(err, &cerr), "want a Connect error, got %v", err)
			require.Equal(t, connect.CodeResourceExhausted, cerr.Code(), cerr.Message())
			var retry *errdetails.RetryInfo
			var failure *errdetails.QuotaFailure
			for _, d := range cerr.Details() {
				v, derr := d.Value()
				require.NoError(t, derr)
				switch v := v.(type) {
				case *errdetails.RetryInfo:
					retry = v
				case *errdetails.QuotaFailure:
					failure = v
				}
			}
			require.NotNil(t, retry, "RetryInfo detail")
			delay := retry.RetryDelay.AsDuration()
			require.Equal(t, 500*time.Millisecond, delay, "one token at 2 per second")
			require.Equal(t, "1", cerr.Meta().Get("Retry-After"))
			require.NotNil(t, failure, "QuotaFailure detail")
			require.Equal(t, "namespace:alpha", failure.Violations[0].Subject)
			require.Equal(t, 1.0, testutil.ToFloat64(refusals.Collector("alpha", ratelimit.QuotaName)), "the refusal is counted")

			clk.Advance(delay - time.Millisecond)
			require.Error(t, call(keyA), "still refused just before the delay")
			clk.Advance(time.Millisecond)
			require.NoError(t, call(keyA), "admitted once the delay has passed")
			require.Error(t, call(keyA), "and that took the only token")
		})
	}
}

func TestBucketsArePerKey(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	l, err := ratelimit.New(ratelimit.Config{Default: ratelimit.Rate{PerSecond: 1, Burst: 2}}, ratelimit.Options{Clock: clk})
	require.NoError(t, err)
	call := serve(t, l)
	require.NoError(t, call(keyA))
	require.NoError(t, call(keyA))
	require.Error(t, call(keyA), "key A is exhausted")
	require.NoError(t, call(keyB), "key B of the same namespace has its own bucket")
	require.NoError(t, call(keyB))
	require.Error(t, call(keyB))
}

func TestNamespaceOverride(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	l, err := ratelimit.New(ratelimit.Config{
		Default:    ratelimit.Rate{PerSecond: 1, Burst: 1},
		Namespaces: ratelimit.NamespaceRates{"big": {PerSecond: 10, Burst: 5}, "ops": {}},
	}, ratelimit.Options{Clock: clk})
	require.NoError(t, err)

	admitted := func(p apikey.Principal, n int) int {
		ok := 0
		for range n {
			if l.Allow(p) == 0 {
				ok++
			}
		}
		return ok
	}
	require.Equal(t, 1, admitted(principal("small", "k1"), 10), "the default burst")
	require.Equal(t, 5, admitted(principal("big", "k2"), 10), "big's own burst")
	require.Equal(t, 100, admitted(principal("ops", "k3"), 100), "ops is not limited")
	require.Equal(t, 100*time.Millisecond, l.Allow(principal("big", "k2")), "big refills at 10 per second")
	require.Equal(t, time.Second, l.Allow(principal("small", "k1")), "small refills at 1 per second")
}

func TestIdleBucketsAreEvictedBeyondMaxKeys(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	l, err := ratelimit.New(ratelimit.Config{Default: ratelimit.Rate{PerSecond: 1, Burst: 1}, MaxKeys: 2}, ratelimit.Options{Clock: clk})
	require.NoError(t, err)
	a, b, c := principal("ns", "a"), principal("ns", "b"), principal("ns", "c")
	require.Zero(t, l.Allow(a))
	require.Zero(t, l.Allow(b))
	require.NotZero(t, l.Allow(a), "a is exhausted, and now the most recently used")
	require.Zero(t, l.Allow(c), "c takes b's place: b was idle longest")
	require.Equal(t, 2, l.Len())
	require.NotZero(t, l.Allow(a), "a was kept, still exhausted")
	require.Zero(t, l.Allow(b), "b was evicted and starts with a full bucket")
	require.Equal(t, 2, l.Len())

	many, err := ratelimit.New(ratelimit.Config{Default: ratelimit.Rate{PerSecond: 1, Burst: 1}, MaxKeys: 100}, ratelimit.Options{Clock: clk})
	require.NoError(t, err)
	for i := range 10_000 {
		many.Allow(principal("ns", fmt.Sprint("key-", i)))
	}
	require.Equal(t, 100, many.Len(), "however many keys call, at most MaxKeys buckets")
}

func TestUnlimitedConfigAdmitsEverything(t *testing.T) {
	t.Parallel()
	l, err := ratelimit.New(ratelimit.Config{}, ratelimit.Options{Clock: clock.NewFake(t0)})
	require.NoError(t, err)
	for range 1000 {
		require.Zero(t, l.Allow(principal("ns", "k")))
	}
	require.Zero(t, l.Len(), "no bucket is kept for an unlimited namespace")
}

func TestFlags(t *testing.T) {
	t.Parallel()
	var cfg ratelimit.Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.Register(fs)
	require.Equal(t, ratelimit.DefaultRate, cfg.Default)
	require.Equal(t, ratelimit.DefaultMaxKeys, cfg.MaxKeys)
	require.NoError(t, fs.Parse([]string{"--rate-limit", "0.5:5", "--rate-limit-namespaces", " big=100:200, ops=off ", "--rate-limit-keys", "50"}))
	require.Equal(t, ratelimit.Rate{PerSecond: 0.5, Burst: 5}, cfg.Default)
	require.Equal(t, ratelimit.NamespaceRates{"big": {PerSecond: 100, Burst: 200}, "ops": {}}, cfg.Namespaces)
	require.Equal(t, "big=100:200,ops=0", cfg.Namespaces.String())
	require.Equal(t, 50, cfg.MaxKeys)

	for _, bad := range [][]string{
		{"--rate-limit", "50"},
		{"--rate-limit", "0:10"},
		{"--rate-limit", "-1:10"},
		{"--rate-limit", "5:0"},
		{"--rate-limit", "5:x"},
		{"--rate-limit-namespaces", "big"},
		{"--rate-limit-namespaces", "big=1:1,big=2:2"},
		{"--rate-limit-namespaces", "=1:1"},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(discard{})
		var c ratelimit.Config
		c.Register(fs)
		require.Error(t, fs.Parse(bad), "%v", bad)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
