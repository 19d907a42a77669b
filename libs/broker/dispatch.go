package broker

import (
	"fmt"
	"time"
)

// Priorities of dispatch, highest first. A job's priority picks its queue, so
// a backlog of low-priority work never delays high (RabbitMQ 3.10's quorum
// queues have no message priorities).
var dispatchPriorities = [...]string{"high", "normal", "low"}

// DispatchRoutingKey is the routing key of a dispatch request of priority
// ("high", "normal" or "low") on the dispatch exchange.
func DispatchRoutingKey(priority string) string { return "dispatch." + priority }

// DispatchQueue is the name of the quorum queue of priority.
func DispatchQueue(queuePrefix, priority string) string { return queuePrefix + "." + priority }

// DispatchQueues are the bindings of the per-priority dispatch queues. The
// binding key "#.dispatch.<priority>" matches both a fresh request
// ("dispatch.high") and one coming back from a delay tier, whose routing key
// carries the tier in front ("tier.5000.dispatch.high"; see RetryRoutingKey).
func DispatchQueues(exchange, queuePrefix string) []QueueBinding {
	bindings := make([]QueueBinding, 0, len(dispatchPriorities))
	for _, p := range dispatchPriorities {
		bindings = append(bindings, QueueBinding{
			Exchange: exchange, Queue: DispatchQueue(queuePrefix, p), BindingKey: "#." + DispatchRoutingKey(p),
		})
	}
	return bindings
}

// RetryRoutingKey is the routing key that parks a dispatch request of
// priority in the delay tier of the given length on the retry exchange. When
// the tier's TTL expires, RabbitMQ dead-letters the message, with this same
// routing key, to the dispatch exchange, where "#.dispatch.<priority>"
// routes it back to its priority's queue.
func RetryRoutingKey(tier time.Duration, priority string) string {
	return fmt.Sprintf("tier.%d.%s", tier.Milliseconds(), DispatchRoutingKey(priority))
}

// RetryTierQueue is the name of the delay queue of tier.
func RetryTierQueue(queuePrefix string, tier time.Duration) string {
	return fmt.Sprintf("%s.%dms", queuePrefix, tier.Milliseconds())
}

// DefaultRetryTiers returns the dispatcher's delay tiers unless configured
// otherwise: one delay queue each, from 1 s to 24 h, so that any backoff
// the registry accepts (1 s to 24 h) lands on a tier at most 2.5 times
// (usually much less) longer. Here beside RetryTiers, so that what tears
// a mesh down (libs/meshrun) names the same queues the dispatcher declared.
func DefaultRetryTiers() []time.Duration {
	return []time.Duration{
		time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
	}
}

// RetryTiers are the delay queues: one per tier, each with x-message-ttl =
// the tier and a dead-letter exchange back to dispatchExchange. A queue per
// tier, not a TTL per message, because RabbitMQ expires messages only at a
// queue's head: a short per-message TTL behind a long one would wait for it.
func RetryTiers(retryExchange, queuePrefix, dispatchExchange string, tiers []time.Duration) []QueueBinding {
	bindings := make([]QueueBinding, 0, len(tiers))
	for _, tier := range tiers {
		bindings = append(bindings, QueueBinding{
			Exchange:   retryExchange,
			Queue:      RetryTierQueue(queuePrefix, tier),
			BindingKey: fmt.Sprintf("tier.%d.#", tier.Milliseconds()),
			Arguments: map[string]any{
				"x-message-ttl":          tier.Milliseconds(),
				"x-dead-letter-exchange": dispatchExchange,
				// At-least-once dead-lettering needs quorum queues and
				// reject-publish overflow: a message expiring from a tier
				// is not lost if the dispatch queue briefly refuses it.
				"x-dead-letter-strategy": "at-least-once",
				"x-overflow":             "reject-publish",
			},
		})
	}
	return bindings
}
