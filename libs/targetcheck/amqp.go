package targetcheck

import (
	"fmt"
	"strings"
)

// ReservedAMQPPrefix starts the names of cronmesh's own exchanges and
// queues.
const ReservedAMQPPrefix = "cronmesh."

// AMQPPolicy says where AMQP targets may publish. A nil policy allows
// nothing.
type AMQPPolicy struct {
	reservedPrefixes []string
}

// NewAMQPPolicy returns the policy that refuses exchange names (and, on
// the default exchange, queue names) starting with one of reservedPrefixes;
// none means ReservedAMQPPrefix.
func NewAMQPPolicy(reservedPrefixes ...string) (*AMQPPolicy, error) {
	if len(reservedPrefixes) == 0 {
		reservedPrefixes = []string{ReservedAMQPPrefix}
	}
	for _, p := range reservedPrefixes {
		if p == "" {
			return nil, fmt.Errorf("targetcheck: an empty reserved AMQP prefix would reserve every name")
		}
	}
	return &AMQPPolicy{reservedPrefixes: reservedPrefixes}, nil
}

// Refusal says why namespace may not publish to exchange with routingKey:
// the field to blame ("exchange" or "routing_key") and the reason, or two
// empty strings when it may.
func (p *AMQPPolicy) Refusal(namespace, exchange, routingKey string) (field, reason string) {
	if p == nil {
		return "exchange", "AMQP targets are not allowed"
	}
	for _, r := range p.reservedPrefixes {
		if strings.HasPrefix(exchange, r) {
			return "exchange", fmt.Sprintf("names starting with %q are reserved for cronmesh", r)
		}
		if exchange == "" && strings.HasPrefix(routingKey, r) {
			return "routing_key", fmt.Sprintf("queues starting with %q are reserved for cronmesh", r)
		}
	}
	return "", ""
}
