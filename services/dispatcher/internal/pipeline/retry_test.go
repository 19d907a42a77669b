package pipeline_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"
)

func policy(maxRetries *int32, initial, maxBackoff time.Duration, mult float64) *registryv1.RetryPolicy {
	p := &registryv1.RetryPolicy{MaxRetries: maxRetries, Multiplier: mult}
	if initial != 0 {
		p.InitialBackoff = durationpb.New(initial)
	}
	if maxBackoff != 0 {
		p.MaxBackoff = durationpb.New(maxBackoff)
	}
	return p
}

func TestMaxRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy *registryv1.RetryPolicy
		want   int32
	}{
		{"no policy", nil, 5},
		{"unset", &registryv1.RetryPolicy{}, 5},
		{"zero", &registryv1.RetryPolicy{MaxRetries: proto.Int32(0)}, 0},
		{"two", &registryv1.RetryPolicy{MaxRetries: proto.Int32(2)}, 2},
		{"beyond the registry's cap is honoured", &registryv1.RetryPolicy{MaxRetries: proto.Int32(50)}, 50},
		{"negative", &registryv1.RetryPolicy{MaxRetries: proto.Int32(-3)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, pipeline.MaxRetries(tt.policy))
		})
	}
}

func TestSeriesAttempt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		attempt, first int32
		want           int32
	}{
		{"a slot's first attempt, first_attempt unset", 1, 0, 1},
		{"a slot's third attempt", 3, 0, 3},
		{"first_attempt 1 is the same as unset", 3, 1, 3},
		{"a redrive's first attempt after a dead letter at 3", 4, 4, 1},
		{"a redrive's second attempt", 5, 4, 2},
		{"an invalid first_attempt after attempt counts as 1", 2, 5, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := pipeline.SeriesAttempt(&dispatchv1.DispatchRequest{Attempt: tt.attempt, FirstAttempt: tt.first})
			require.Equal(t, tt.want, got)
		})
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		policy  *registryv1.RetryPolicy
		attempt int32
		want    time.Duration
	}{
		{"defaults, first retry", nil, 1, time.Second},
		{"defaults double", nil, 2, 2 * time.Second},
		{"defaults, fifth retry", nil, 5, 16 * time.Second},
		{"defaults cap at 10 min", nil, 12, 10 * time.Minute},
		{"attempt 0 counts as 1", nil, 0, time.Second},
		{"initial only", policy(nil, 3*time.Second, 0, 0), 3, 12 * time.Second},
		{"multiplier 3", policy(nil, time.Second, time.Hour, 3), 4, 27 * time.Second},
		{"multiplier 1.5", policy(nil, 2*time.Second, 0, 1.5), 3, 4500 * time.Millisecond},
		{"multiplier 1 is constant", policy(nil, 5*time.Second, 0, 1), 9, 5 * time.Second},
		{"multiplier below 1 counts as 1", policy(nil, 5*time.Second, 0, 0.5), 4, 5 * time.Second},
		{"negative multiplier takes the default", policy(nil, time.Second, 0, -2), 3, 4 * time.Second},
		{"NaN multiplier takes the default", policy(nil, time.Second, 0, math.NaN()), 3, 4 * time.Second},
		{"max backoff caps", policy(nil, time.Second, 5*time.Second, 2), 4, 5 * time.Second},
		{"max backoff below initial is initial", policy(nil, time.Minute, time.Second, 2), 3, time.Minute},
		{"negative initial takes the default", policy(nil, -time.Second, 0, 2), 2, 2 * time.Second},
		{"huge multiplier cannot overflow", policy(nil, time.Hour, 24*time.Hour, 10), 400, 24 * time.Hour},
		{"infinite growth caps", policy(nil, time.Second, 0, math.MaxFloat64), 3, 10 * time.Minute},
		{"sub-second initial (tests)", policy(nil, 100*time.Millisecond, 0, 2), 2, 200 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, pipeline.Backoff(tt.policy, tt.attempt))
		})
	}
}

func TestTier(t *testing.T) {
	t.Parallel()
	tiers := broker.DefaultRetryTiers()
	tests := []struct {
		name  string
		tiers []time.Duration
		want  time.Duration
		tier  time.Duration
	}{
		{"below the smallest", tiers, 10 * time.Millisecond, time.Second},
		{"zero", tiers, 0, time.Second},
		{"exact", tiers, 5 * time.Second, 5 * time.Second},
		{"rounds up, never down", tiers, 5*time.Second + time.Millisecond, 10 * time.Second},
		{"16 s waits 30 s", tiers, 16 * time.Second, 30 * time.Second},
		{"10 min", tiers, 10 * time.Minute, 10 * time.Minute},
		{"the largest", tiers, 24 * time.Hour, 24 * time.Hour},
		{"beyond the largest is the largest", tiers, 48 * time.Hour, 24 * time.Hour},
		{"unsorted tiers", []time.Duration{time.Minute, time.Second, 10 * time.Second}, 2 * time.Second, 10 * time.Second},
		{"one tier", []time.Duration{time.Second}, time.Hour, time.Second},
		{"no tiers", nil, time.Second, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.tier, pipeline.Tier(tt.tiers, tt.want))
		})
	}
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	tiers := broker.DefaultRetryTiers()
	small := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}
	tests := []struct {
		name       string
		tiers      []time.Duration
		policy     *registryv1.RetryPolicy
		attempt    int32
		retryAfter time.Duration
		want       time.Duration
	}{
		{"policy defaults, attempt 1", tiers, nil, 1, 0, time.Second},
		{"policy defaults, attempt 3 (4 s) waits 5 s", tiers, nil, 3, 0, 5 * time.Second},
		{"policy defaults, attempt 5 (16 s) waits 30 s", tiers, nil, 5, 0, 30 * time.Second},
		{"multiplier 3, attempt 3 (9 s) waits 10 s", tiers, policy(nil, time.Second, 0, 3), 3, 0, 10 * time.Second},
		{"max backoff caps before rounding", tiers, policy(nil, time.Second, 3*time.Second, 2), 6, 0, 5 * time.Second},
		{"Retry-After is a floor", tiers, nil, 1, 40 * time.Second, time.Minute},
		{"Retry-After shorter than the backoff changes nothing", tiers, nil, 4, 2 * time.Second, 10 * time.Second},
		{"Retry-After of an hour", tiers, nil, 1, time.Hour, time.Hour},
		{"the largest tier bounds", tiers, policy(nil, time.Hour, 24*time.Hour, 10), 5, 0, 24 * time.Hour},
		{"test tiers, attempt 1", small, policy(nil, 100*time.Millisecond, 0, 2), 1, 0, 100 * time.Millisecond},
		{"test tiers, attempt 2", small, policy(nil, 100*time.Millisecond, 0, 2), 2, 0, 200 * time.Millisecond},
		{"test tiers, attempt 3 with Retry-After", small, policy(nil, 100*time.Millisecond, 0, 2), 3, 500 * time.Millisecond, 800 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := pipeline.RetryDelay(tt.tiers, tt.policy, tt.attempt, tt.retryAfter)
			require.Equal(t, tt.want, got)
			require.GreaterOrEqual(t, got, min(tt.retryAfter, tt.tiers[len(tt.tiers)-1]), "never before Retry-After")
		})
	}
}

func TestPriorityName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p    registryv1.Priority
		want string
	}{
		{registryv1.Priority_PRIORITY_HIGH, "high"},
		{registryv1.Priority_PRIORITY_NORMAL, "normal"},
		{registryv1.Priority_PRIORITY_LOW, "low"},
		{registryv1.Priority_PRIORITY_UNSPECIFIED, "normal"},
		{registryv1.Priority(42), "normal"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, pipeline.PriorityName(tt.p), tt.p.String())
	}
	require.Equal(t, "x|dispatch.high", pipeline.DispatchRoute("x", registryv1.Priority_PRIORITY_HIGH))
}
