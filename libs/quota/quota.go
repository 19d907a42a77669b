package quota

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// Limits is a per-namespace limit: Namespaces overrides Default for the
// namespaces it names. A limit of 0 means unlimited, so an operator can lift
// a quota for one trusted namespace ("ops=0") or for all (Default 0).
type Limits struct {
	Default    int
	Namespaces Overrides
}

// For returns the limit of namespace; 0 means unlimited.
func (l Limits) For(namespace string) int {
	if n, ok := l.Namespaces[namespace]; ok {
		return n
	}
	return l.Default
}

// Validate refuses a negative Default (Overrides refuses negative values as
// it parses them); name is the flag, for the message.
func (l Limits) Validate(name string) error {
	if l.Default < 0 {
		return fmt.Errorf("--%s must be >= 0 (0: no limit), got %d", name, l.Default)
	}
	for ns, n := range l.Namespaces {
		if n < 0 {
			return fmt.Errorf("--%s-namespaces: %s must be >= 0 (0: no limit), got %d", name, ns, n)
		}
	}
	return nil
}

// Overrides is a flag.Value for per-namespace limits written
// "namespace=N,namespace=N" (spaces around items ignored). Set replaces the
// whole map, so an environment value overrides rather than adds; a negative
// limit, a missing "=" or a namespace given twice is an error.
type Overrides map[string]int

// String lists the overrides sorted by namespace; safe on a nil receiver.
func (o *Overrides) String() string {
	if o == nil {
		return ""
	}
	items := make([]string, 0, len(*o))
	for _, ns := range slices.Sorted(maps.Keys(*o)) {
		items = append(items, ns+"="+strconv.Itoa((*o)[ns]))
	}
	return strings.Join(items, ",")
}

// Set replaces the overrides with those of v.
func (o *Overrides) Set(v string) error {
	parsed := Overrides{}
	err := ParseNamespaceList(v, func(namespace, value string) error {
		n, err := strconv.Atoi(value)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a whole number >= 0", value)
		}
		parsed[namespace] = n
		return nil
	})
	if err != nil {
		return err
	}
	*o = parsed
	return nil
}

// ParseNamespaceList splits v, "namespace=value,namespace=value", and calls
// set for each item; empty items are skipped. It refuses an item without
// "=", an empty namespace and a namespace given twice, and wraps set's error
// with the namespace.
func ParseNamespaceList(v string, set func(namespace, value string) error) error {
	seen := map[string]bool{}
	for item := range strings.SplitSeq(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		namespace, value, ok := strings.Cut(item, "=")
		namespace, value = strings.TrimSpace(namespace), strings.TrimSpace(value)
		if !ok || namespace == "" {
			return fmt.Errorf("%q: want namespace=value", item)
		}
		if seen[namespace] {
			return fmt.Errorf("namespace %q given twice", namespace)
		}
		seen[namespace] = true
		if err := set(namespace, value); err != nil {
			return fmt.Errorf("namespace %q: %w", namespace, err)
		}
	}
	return nil
}

// Quota is one named per-namespace limit with the counter of its refusals.
// A nil *Quota is unlimited.
type Quota struct {
	name     string
	limits   Limits
	refusals *Refusals
}

// New returns the quota called name (a metric label and the QuotaFailure
// subject, e.g. "jobs") with limits; refusals counts its refusals and may be
// nil.
func New(name string, limits Limits, refusals *Refusals) *Quota {
	return &Quota{name: name, limits: limits, refusals: refusals}
}

// Limit returns namespace's limit; 0 means unlimited, as for a nil Quota.
func (q *Quota) Limit(namespace string) int {
	if q == nil {
		return 0
	}
	return q.limits.For(namespace)
}

// Check returns nil when namespace, holding used, may take adding more, and
// otherwise an *ExceededError, counting the refusal.
func (q *Quota) Check(namespace string, used, adding int) error {
	limit := q.Limit(namespace)
	if limit == 0 || used+adding <= limit {
		return nil
	}
	q.refusals.Add(namespace, q.name)
	return &ExceededError{Namespace: namespace, Quota: q.name, Limit: limit, Used: used, Adding: adding}
}

// ExceededError is a request refused because it would take its namespace
// beyond a quota.
type ExceededError struct {
	Namespace string
	// Quota names the quota ("jobs", "concurrent_backfills").
	Quota string
	// Limit is the namespace's limit, Used what it held, Adding what the
	// request asked for.
	Limit, Used, Adding int
}

func (e *ExceededError) Error() string {
	return fmt.Sprintf("quota %s of namespace %q exceeded: %d in use, %d requested, limit %d",
		e.Quota, e.Namespace, e.Used, e.Adding, e.Limit)
}

// ConnectError returns RESOURCE_EXHAUSTED with a google.rpc.QuotaFailure
// detail whose subject is "namespace:<namespace>" and whose description
// names the quota and its limit.
func (e *ExceededError) ConnectError() *connect.Error {
	return Exhausted(e.Namespace, e.Error())
}

// Exhausted returns RESOURCE_EXHAUSTED with message description and a
// google.rpc.QuotaFailure detail that names namespace as its subject.
func Exhausted(namespace, description string) *connect.Error {
	err := connect.NewError(connect.CodeResourceExhausted, errors.New(description))
	detail, derr := connect.NewErrorDetail(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject: "namespace:" + namespace, Description: description,
	}}})
	if derr == nil {
		err.AddDetail(detail)
	}
	return err
}

// Refusals counts requests refused by a quota:
//
//	quota_refusals_total{namespace,quota}
//
// namespace is bounded by the configured keys' namespaces, quota by the few
// quotas there are. A nil *Refusals counts nothing.
type Refusals struct {
	total *prometheus.CounterVec
}

// NewRefusals registers the counter on reg, or reuses the one already
// registered there, so the server's rate limiter and a service's own quotas
// share it.
func NewRefusals(reg prometheus.Registerer) (*Refusals, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quota_refusals_total",
		Help: "Requests refused with RESOURCE_EXHAUSTED by a per-namespace quota or rate limit, by namespace and quota.",
	}, []string{"namespace", "quota"})
	if err := reg.Register(vec); err != nil {
		are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err)
		if !ok {
			return nil, fmt.Errorf("register quota refusals: %w", err)
		}
		existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
		if !ok {
			return nil, fmt.Errorf("register quota refusals: %w", err)
		}
		vec = existing
	}
	return &Refusals{total: vec}, nil
}

// Add counts one refusal of namespace by quota.
func (r *Refusals) Add(namespace, quota string) {
	if r == nil {
		return
	}
	r.total.WithLabelValues(namespace, quota).Inc()
}

// Collector returns the counter of namespace's refusals by quota, for
// tests and readers of the counter.
func (r *Refusals) Collector(namespace, quota string) prometheus.Collector {
	return r.total.WithLabelValues(namespace, quota)
}
