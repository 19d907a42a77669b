package pipeline

import (
	"math"
	"slices"
	"time"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
)

// Defaults of a retry policy's unset fields (registryv1.RetryPolicy), as
// the registry documents them.
const (
	DefaultPolicyMaxRetries     = 5
	DefaultPolicyInitialBackoff = time.Second
	DefaultPolicyMaxBackoff     = 10 * time.Minute
	DefaultPolicyMultiplier     = 2.0
)

// MaxRetries is the policy's number of retries after the first attempt:
// DefaultPolicyMaxRetries when unset, 0 when negative. The registry caps
// it at 10; the dispatcher honours whatever the request carries.
func MaxRetries(policy *registryv1.RetryPolicy) int32 {
	if policy == nil || policy.MaxRetries == nil {
		return DefaultPolicyMaxRetries
	}
	return max(policy.GetMaxRetries(), 0)
}

// SeriesAttempt is req's attempt counted within its series of deliveries
// (DispatchRequest.first_attempt, 0 read as 1): a slot's own attempts count
// from 1, a redrive's from the attempt after its dead letter's last. The
// retry policy applies to it, so a redrive gets the policy's retries and
// backoffs afresh while its attempt numbers go on, unique within the
// execution, as the lifecycle events' (execution_id, attempt, kind)
// identity needs. Never below 1.
func SeriesAttempt(req *dispatchv1.DispatchRequest) int32 {
	return max(req.GetAttempt()-max(req.GetFirstAttempt(), 1)+1, 1)
}

// Backoff is the delay the policy wants between attempt (1-based, the
// attempt that just failed) and the next one, retry number `attempt`:
// min(max_backoff, initial_backoff * multiplier^(attempt-1)). Unset or
// non-positive fields take their defaults (DefaultPolicyInitialBackoff,
// DefaultPolicyMaxBackoff, DefaultPolicyMultiplier); a multiplier below 1
// counts as 1 (a backoff never shrinks); a max_backoff below
// initial_backoff counts as initial_backoff. The arithmetic is in float64 and capped before it
// becomes a Duration, so large attempts or multipliers cannot overflow.
// An attempt below 1 counts as 1.
func Backoff(policy *registryv1.RetryPolicy, attempt int32) time.Duration {
	initial := positive(policy.GetInitialBackoff().AsDuration(), policy.GetInitialBackoff() != nil, DefaultPolicyInitialBackoff)
	maxBackoff := max(positive(policy.GetMaxBackoff().AsDuration(), policy.GetMaxBackoff() != nil, DefaultPolicyMaxBackoff), initial)
	mult := policy.GetMultiplier()
	switch {
	case mult <= 0 || math.IsNaN(mult):
		mult = DefaultPolicyMultiplier
	case mult < 1:
		mult = 1
	}
	delay := float64(initial) * math.Pow(mult, float64(max(attempt, 1)-1))
	if math.IsInf(delay, 0) || delay >= float64(maxBackoff) {
		return maxBackoff
	}
	return time.Duration(delay)
}

func positive(d time.Duration, set bool, def time.Duration) time.Duration {
	if !set || d <= 0 {
		return def
	}
	return d
}

// Tier is the delay tier a retry that wants to wait `want` is parked in:
// the smallest tier at least as long, so a retry never comes back early
// (in particular never before the target's Retry-After); the largest tier
// when want exceeds them all (a delay beyond the largest tier is cut to it).
// tiers need not be sorted; none gives 0.
func Tier(tiers []time.Duration, want time.Duration) time.Duration {
	if len(tiers) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(tiers))
	i, _ := slices.BinarySearch(sorted, want)
	if i == len(sorted) {
		return sorted[len(sorted)-1]
	}
	return sorted[i]
}

// RetryDelay is the tier of the retry after attempt failed: the policy's
// Backoff, raised to the target's Retry-After, rounded up to a tier.
func RetryDelay(tiers []time.Duration, policy *registryv1.RetryPolicy, attempt int32, retryAfter time.Duration) time.Duration {
	return Tier(tiers, max(Backoff(policy, attempt), retryAfter))
}

// PriorityName is the dispatch priority of p as the broker names it
// ("high", "normal", "low"); unspecified and unknown priorities are normal,
// as the trigger routes them.
func PriorityName(p registryv1.Priority) string {
	switch p {
	case registryv1.Priority_PRIORITY_HIGH:
		return "high"
	case registryv1.Priority_PRIORITY_LOW:
		return "low"
	default:
		return "normal"
	}
}

// DispatchRoute is the Watermill topic (broker.Route) that publishes a
// fresh request of priority p to the dispatch exchange: what the trigger
// publishes, and what a redrive publishes.
func DispatchRoute(exchange string, p registryv1.Priority) string {
	return broker.Route(exchange, broker.DispatchRoutingKey(PriorityName(p)))
}
