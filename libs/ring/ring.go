package ring

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cronmesh/cronmesh/libs/clock"
)

const (
	// DefaultPrefix is the key prefix when Options.Prefix is empty.
	DefaultPrefix = "/cronmesh/trigger/"
	// DefaultPartitions is P when Options.Partitions is 0.
	DefaultPartitions = 256
	// DefaultLeaseTTL is the lease TTL when Options.LeaseTTL is 0: short
	// enough that a dead node's partitions fire again well within the 5 s
	// promise (TTL + server expiry check + takeover).
	DefaultLeaseTTL = 2 * time.Second

	// minMargin is the least safety margin between the local deadline and
	// the earliest possible server-side expiry (see margin).
	minMargin = 200 * time.Millisecond
	// opTimeout bounds every etcd call but keep-alives (which are bounded
	// by the keep-alive interval); a timed-out call is retried.
	opTimeout = 5 * time.Second
	// batchSize is how many partitions one etcd transaction acquires or
	// releases (as nested transactions). etcd refuses more than 128
	// operations per transaction level by default (--max-txn-ops), nested
	// levels included.
	batchSize = 64
	// retryBase is the first retry delay after a failed etcd call.
	retryBase = 100 * time.Millisecond
)

// Options configures a Ring. Client and NodeID are required; New fills the
// other zero fields with defaults.
type Options struct {
	// Client is the etcd client; the ring never closes it.
	Client *clientv3.Client
	// Prefix is the key prefix, ending with "/" (default DefaultPrefix).
	// Members live under Prefix+"members/", owner keys under
	// Prefix+"partitions/<p>", elections under Prefix+"election/<name>/".
	Prefix string
	// NodeID identifies this process in the ring; it must be unique among
	// the live nodes (two processes with one id would both believe they own
	// the same partitions' keys). Required.
	NodeID string
	// Address is the advertised API address, stored in the member value for
	// Snapshot; informational only.
	Address string
	// Partitions is P (default DefaultPartitions). It must be the same on
	// every node and never change for a cluster (see Partition).
	Partitions int
	// LeaseTTL is the session lease TTL (default DefaultLeaseTTL). etcd TTLs
	// are whole seconds: it is rounded up, to at least 1 s. The server may
	// grant more (its minimum is ceil(1.5 × election timeout), 2 s with
	// etcd's defaults); the ring then uses the granted TTL.
	LeaseTTL time.Duration
	// Clock is the time source for the lease deadline and all waits
	// (default clock.Real{}). Owned and Holds compare Clock.Now() with the
	// deadline, so the clock must be monotonic, as clock.Real is.
	Clock clock.Clock
	// Logger receives session restarts and retried etcd errors (default
	// slog.Default()).
	Logger *slog.Logger
	// Metrics, when set, registers ring_owned_partitions,
	// ring_session_restarts_total, ring_acquire_conflicts_total and
	// ring_fenced_total; New fails if they are already registered there.
	Metrics prometheus.Registerer
}

// Ring is one node's view and share of the partition ring. Create it with
// New and call Run once; the other methods are safe for concurrent use at
// any time, before, during and after Run.
type Ring struct {
	client     *clientv3.Client
	prefix     string
	nodeID     string
	address    string
	partitions int
	ttlSeconds int64
	clock      clock.Clock
	log        *slog.Logger
	metrics    metrics

	// keepAliveOnce, when set (by tests, before Run), replaces
	// client.KeepAliveOnce, to make keep-alives fail without touching etcd.
	keepAliveOnce func(context.Context, clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error)

	changes   chan struct{}
	ready     chan struct{}
	readyOnce sync.Once
	running   atomic.Bool

	mu       sync.Mutex
	sess     *session      // the live session, nil between sessions
	sessCh   chan struct{} // closed and replaced whenever sess changes
	owned    map[int]int64 // partitions held in sess, with their epochs
	deadline time.Time     // local lease deadline of sess; zero without one
}

// New validates opts, fills defaults and returns a Ring that does nothing
// until Run.
func New(opts Options) (*Ring, error) {
	if opts.Client == nil {
		return nil, errors.New("ring: Options.Client is required")
	}
	if opts.NodeID == "" {
		return nil, errors.New("ring: Options.NodeID is required")
	}
	prefix := cmp.Or(opts.Prefix, DefaultPrefix)
	if !strings.HasSuffix(prefix, "/") {
		return nil, fmt.Errorf("ring: Options.Prefix %q must end with /", prefix)
	}
	if opts.Partitions < 0 {
		return nil, fmt.Errorf("ring: Options.Partitions = %d, want > 0", opts.Partitions)
	}
	if opts.LeaseTTL < 0 {
		return nil, fmt.Errorf("ring: Options.LeaseTTL = %s, want > 0", opts.LeaseTTL)
	}
	ttl := cmp.Or(opts.LeaseTTL, DefaultLeaseTTL)
	ttlSeconds := max(int64((ttl+time.Second-1)/time.Second), 1)
	r := &Ring{
		client:     opts.Client,
		prefix:     prefix,
		nodeID:     opts.NodeID,
		address:    opts.Address,
		partitions: cmp.Or(opts.Partitions, DefaultPartitions),
		ttlSeconds: ttlSeconds,
		clock:      cmp.Or[clock.Clock](opts.Clock, clock.Real{}),
		log:        cmp.Or(opts.Logger, slog.Default()).With("component", "ring", "node", opts.NodeID),
		metrics:    newMetrics(),
		changes:    make(chan struct{}, 1),
		ready:      make(chan struct{}),
		sessCh:     make(chan struct{}),
	}
	if opts.Metrics != nil {
		if err := r.metrics.register(opts.Metrics); err != nil {
			return nil, fmt.Errorf("ring: register metrics: %w", err)
		}
	}
	return r, nil
}

// NodeID returns Options.NodeID.
func (r *Ring) NodeID() string { return r.nodeID }

// Partitions returns P.
func (r *Ring) Partitions() int { return r.partitions }

// Owned returns the partitions this node may fire now, each with its epoch
// (the CreateRevision of its owner key), as a fresh map the caller may keep
// and modify. It is empty before the first acquisition, between sessions,
// after Run returned, and as soon as Clock.Now() reaches the session's local
// deadline, even if the ring has not noticed yet (a stalled keep-alive loop
// or a paused process cannot extend ownership past the deadline). A
// partition being handed over disappears from Owned before its key is
// deleted, so no two nodes list it at once.
func (r *Ring) Owned() map[int]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.owned) == 0 || !r.clock.Now().Before(r.deadline) {
		return map[int]int64{}
	}
	return maps.Clone(r.owned)
}

// Holds reports whether partition p is still owned at epoch and the lease's
// local deadline has not passed. The engine calls it right before committing
// a firing; the commit must still be fenced by the epoch in the database,
// since this node may pause between Holds and the commit.
func (r *Ring) Holds(p int, epoch int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.owned[p]
	return ok && e == epoch && r.clock.Now().Before(r.deadline)
}

// Changes is signalled whenever the owned set changes. It has a buffer of
// one and the ring never blocks sending on it: signals coalesce, so a reader
// must re-read Owned after each receive rather than count signals. It is not
// signalled when ownership lapses because the deadline passed; the ring then
// drops the session within moments and signals. Never closed.
func (r *Ring) Changes() <-chan struct{} { return r.changes }

// Ready is closed the first time this node holds every partition currently
// assigned to it (possibly none, when there are more nodes than partitions).
// It stays closed for the life of the Ring, whatever happens after.
func (r *Ring) Ready() <-chan struct{} { return r.ready }

// signal notifies Changes without blocking.
func (r *Ring) signal() {
	select {
	case r.changes <- struct{}{}:
	default:
	}
}

// publish makes held the owned set, if s is still the live session (a
// late etcd reply of an ended session must not resurrect ownership).
func (r *Ring) publish(s *session, held map[int]int64) {
	r.mu.Lock()
	if r.sess != s {
		r.mu.Unlock()
		return
	}
	changed := !maps.Equal(r.owned, held)
	if changed {
		r.owned = maps.Clone(held)
	}
	r.mu.Unlock()
	if changed {
		r.metrics.owned.Set(float64(len(held)))
		r.signal()
	}
}

// setDeadline records a new local deadline for s, if still live.
func (r *Ring) setDeadline(s *session, d time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sess == s {
		r.deadline = d
	}
}

// deadlineOf returns s's local deadline, zero if s is no longer live.
func (r *Ring) deadlineOf(s *session) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sess != s {
		return time.Time{}
	}
	return r.deadline
}

// markReady closes Ready once.
func (r *Ring) markReady() {
	r.readyOnce.Do(func() { close(r.ready) })
}

// currentSession returns the live session (nil if none) and a channel
// closed when that changes.
func (r *Ring) currentSession() (*session, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sess
	if s != nil && s.ctx.Err() != nil {
		s = nil
	}
	return s, r.sessCh
}

// key helpers.

func (r *Ring) membersPrefix() string    { return r.prefix + "members/" }
func (r *Ring) partitionsPrefix() string { return r.prefix + "partitions/" }
func (r *Ring) memberKey() string        { return r.membersPrefix() + r.nodeID }
func (r *Ring) partitionKey(p int) string {
	return r.partitionsPrefix() + strconv.Itoa(p)
}

// parsePartition returns the partition of an owner key, false for keys that
// are not one (or out of range: a ring configured with another P).
func (r *Ring) parsePartition(key string) (int, bool) {
	s, ok := strings.CutPrefix(key, r.partitionsPrefix())
	if !ok || s == "" {
		return 0, false
	}
	p := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' || (i == 0 && c == '0' && len(s) > 1) {
			return 0, false
		}
		p = p*10 + int(c-'0')
		if p >= r.partitions {
			return 0, false
		}
	}
	return p, true
}
