package targetcheck

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cronmesh/cronmesh/libs/apikey"
)

// ReservedAMQPPrefix starts the default names of cronmesh's own exchanges
// and queues; no target may publish to a name that starts with it.
const ReservedAMQPPrefix = "cronmesh."

// reservedNamespaces are first name segments that are no tenant's AMQP
// space even if a namespace has that name: "cronmesh" holds cronmesh's
// own names, "amq" RabbitMQ's built-in exchanges (amq.topic, which plugins
// such as MQTT route through, amq.direct, ...).
var reservedNamespaces = []string{"cronmesh", "amq"}

// InternalName is one exchange or queue name a service is configured with,
// and the flag that configured it (for the error that names it).
type InternalName struct {
	Flag string
	Name string
	// Family is true for a prefix of a family of queues (the dispatch
	// queues "<prefix>.high", the delay tiers "<prefix>.<ms>ms"): every
	// name starting with Name + "." is internal.
	Family bool
}

// AMQPPolicyOptions configures NewAMQPPolicy.
type AMQPPolicyOptions struct {
	// Internal are the service's own exchange and queue names; targets
	// may never publish to them, whatever they are. Names starting with
	// ReservedAMQPPrefix are reserved in any case.
	Internal []InternalName
	// Allow gives namespaces names outside their own prefix: namespace →
	// entries, each an exact exchange (or, on the default exchange, queue)
	// name, or a prefix ending in "*" ("shared.events.*").
	Allow map[string][]string
}

// AMQPPolicy says where a namespace's AMQP targets may publish: to an
// exchange (on the default exchange "": a queue) named "<namespace>."
// followed by anything, or on the namespace's allow-list, and never to a
// reserved name. The routing key on a named exchange is free: the
// exchange's bindings, which the operator makes, decide where it goes. A
// nil policy allows nothing.
type AMQPPolicy struct {
	internal []InternalName
	allow    map[string][]string
}

// NewAMQPPolicy checks opts and returns the policy. It fails (so that the
// service refuses to start) when an internal name could be reached by a
// target: when it starts with "<x>." for an x that could be a namespace
// (other than "cronmesh" and "amq"), so that namespace x could publish to
// it, or when an allow-list entry matches it. An empty internal name (the
// component's default) is skipped. An internal name under
// "cronmesh.", or whose part before its first dot cannot be a namespace
// (an underscore, a capital, no dot at all), is safe. It also fails on a
// malformed allow-list.
func NewAMQPPolicy(opts AMQPPolicyOptions) (*AMQPPolicy, error) {
	var problems []error
	for ns, entries := range opts.Allow {
		if !apikey.IsNamespace(ns) {
			problems = append(problems, fmt.Errorf("allow-list: %q is not a namespace", ns))
		}
		for _, e := range entries {
			if e == "" || e == "*" || strings.Contains(strings.TrimSuffix(e, "*"), "*") || len(e) > MaxAMQPName {
				problems = append(problems, fmt.Errorf("allow-list of %q: %q is neither a name nor a prefix ending in one '*'", ns, e))
			}
			if strings.HasPrefix(e, ReservedAMQPPrefix) || strings.HasPrefix(ReservedAMQPPrefix, strings.TrimSuffix(e, "*")) && strings.HasSuffix(e, "*") {
				problems = append(problems, fmt.Errorf("allow-list of %q: %q reaches names reserved for cronmesh (%s*)", ns, e, ReservedAMQPPrefix))
			}
		}
	}
	for _, in := range opts.Internal {
		if in.Name == "" {
			continue // the component's default, under ReservedAMQPPrefix
		}
		probe := in.Name
		if in.Family {
			probe += ".x"
		}
		if ns, ok := owningNamespace(probe); ok {
			problems = append(problems, fmt.Errorf("--%s %q could be published to by the AMQP targets of namespace %q: "+
				"choose a name under %q, or one whose part before the first dot cannot be a namespace (an underscore or a capital letter in it)",
				in.Flag, in.Name, ns, ReservedAMQPPrefix))
		}
		for _, ns := range slices.Sorted(maps.Keys(opts.Allow)) {
			for _, e := range opts.Allow[ns] {
				if entryReaches(e, in) {
					problems = append(problems, fmt.Errorf("--%s %q is on the AMQP allow-list of namespace %q (%q)", in.Flag, in.Name, ns, e))
				}
			}
		}
	}
	if err := errors.Join(problems...); err != nil {
		return nil, fmt.Errorf("AMQP target names: %w", err)
	}
	allow := make(map[string][]string, len(opts.Allow))
	for ns, entries := range opts.Allow {
		allow[ns] = slices.Clone(entries)
	}
	return &AMQPPolicy{internal: slices.Clone(opts.Internal), allow: allow}, nil
}

// owningNamespace is the namespace whose prefix reaches name: its part
// before the first dot, when that could be a namespace and is not
// reserved.
func owningNamespace(name string) (string, bool) {
	first, _, found := strings.Cut(name, ".")
	if !found || !apikey.IsNamespace(first) || slices.Contains(reservedNamespaces, first) {
		return "", false
	}
	return first, true
}

// entryReaches reports whether an allow-list entry matches an internal
// name (or a name of an internal family).
func entryReaches(entry string, in InternalName) bool {
	prefix, isPrefix := strings.CutSuffix(entry, "*")
	switch {
	case !in.Family && isPrefix:
		return strings.HasPrefix(in.Name, prefix)
	case !in.Family:
		return entry == in.Name
	case isPrefix:
		family := in.Name + "."
		return strings.HasPrefix(family, prefix) || strings.HasPrefix(prefix, family)
	default:
		return strings.HasPrefix(entry, in.Name+".")
	}
}

// Refusal says why namespace may not publish to exchange with routingKey:
// the field to blame ("exchange", or "routing_key" on the default exchange
// where it names the queue) and the reason, or two empty strings when it
// may. It is the registry's rule at validation and the dispatcher's at
// delivery.
func (p *AMQPPolicy) Refusal(namespace, exchange, routingKey string) (field, reason string) {
	field, name, what := "exchange", exchange, "exchange"
	if exchange == "" {
		field, name, what = "routing_key", routingKey, "queue"
	}
	if p == nil {
		return field, "AMQP targets are not allowed"
	}
	if p.reserved(name) {
		return field, fmt.Sprintf("%s %q is reserved for cronmesh", what, name)
	}
	own := namespace + "."
	if strings.HasPrefix(name, own) && len(name) > len(own) && !slices.Contains(reservedNamespaces, namespace) {
		return "", ""
	}
	for _, e := range p.allow[namespace] {
		if prefix, isPrefix := strings.CutSuffix(e, "*"); (isPrefix && strings.HasPrefix(name, prefix)) || e == name {
			return "", ""
		}
	}
	return field, fmt.Sprintf("%s %q is not the namespace's: a name must start with %q or be on its allow-list", what, name, own)
}

// reserved reports whether name is cronmesh's: under ReservedAMQPPrefix,
// one of the internal names, or in an internal family.
func (p *AMQPPolicy) reserved(name string) bool {
	if strings.HasPrefix(name, ReservedAMQPPrefix) {
		return true
	}
	for _, in := range p.internal {
		if in.Name == "" {
			continue
		}
		if name == in.Name || (in.Family && strings.HasPrefix(name, in.Name+".")) {
			return true
		}
	}
	return false
}

// ParseAllowList parses allow-list entries "namespace=name" (an exact
// exchange or queue name) or "namespace=prefix*", as the
// --target-amqp-allow flag takes them; a namespace may have many entries.
func ParseAllowList(entries []string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, e := range entries {
		ns, name, ok := strings.Cut(strings.TrimSpace(e), "=")
		if !ok || ns == "" || name == "" {
			return nil, fmt.Errorf("AMQP allow-list entry %q is not namespace=name or namespace=prefix*", e)
		}
		out[ns] = append(out[ns], name)
	}
	return out, nil
}

// CheckInternalNames is NewAMQPPolicy's start-up check for a service that
// validates no targets (trigger, history, alerting): it fails when one of
// its exchange or queue names could be reached by a namespace's prefix.
func CheckInternalNames(internal ...InternalName) error {
	_, err := NewAMQPPolicy(AMQPPolicyOptions{Internal: internal})
	return err
}
