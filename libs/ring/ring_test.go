package ring

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/testkit/etcdtest"
)

const (
	testPrefix = "/test/trigger/"
	// waitFor bounds asynchronous outcomes against real etcd; they normally
	// take well under a second.
	waitFor = 15 * time.Second
	tick    = 10 * time.Millisecond
)

// testLogger discards the rings' logs unless RING_TEST_LOG is set (then
// they go to stderr, for debugging).
func testLogger() *slog.Logger {
	if os.Getenv("RING_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// node is a Ring running in the background for a test.
type node struct {
	id     string
	r      *Ring
	cli    *clientv3.Client
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// newNode creates a ring on its own client of c (default options: test
// prefix, TTL 2 s, discarded logs; mod may change them) without running it.
func newNode(t *testing.T, c *etcdtest.Cluster, id string, mod func(*Options)) *node {
	t.Helper()
	cli := c.Client(t)
	opts := Options{
		Client:   cli,
		Prefix:   testPrefix,
		NodeID:   id,
		Address:  id + ":7000",
		LeaseTTL: 2 * time.Second,
		Logger:   testLogger(),
	}
	if mod != nil {
		mod(&opts)
	}
	r, err := New(opts)
	require.NoError(t, err)
	return &node{id: id, r: r, cli: cli}
}

// start runs the ring until stop (or the test's end).
func (n *node) start(t *testing.T) *node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan error, 1)
	go func() { n.done <- n.r.Run(ctx) }()
	t.Cleanup(func() { n.stop(t) })
	return n
}

// stop cancels Run and waits for it to return nil.
func (n *node) stop(t *testing.T) {
	t.Helper()
	n.once.Do(func() {
		n.cancel()
		select {
		case err := <-n.done:
			require.NoError(t, err)
		case <-time.After(waitFor):
			t.Errorf("ring %s: Run did not return after cancel", n.id)
		}
	})
}

func startNodes(t *testing.T, c *etcdtest.Cluster, names []string, mod func(*Options)) []*node {
	t.Helper()
	nodes := make([]*node, len(names))
	for i, id := range names {
		nodes[i] = newNode(t, c, id, mod).start(t)
	}
	return nodes
}

func nodeIDs(nodes []*node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.id
	}
	return out
}

// requireConverged waits until etcd and every node agree that each
// partition is owned by its rendezvous owner among nodes, and returns the
// snapshot.
func requireConverged(t *testing.T, nodes []*node) State {
	t.Helper()
	members := nodeIDs(nodes)
	var st State
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		st, err = nodes[0].r.Snapshot(context.Background())
		require.NoError(c, err)
		require.Len(c, st.Members, len(nodes))
		require.Len(c, st.Owners, nodes[0].r.partitions)
		for p, o := range st.Owners {
			require.Equal(c, Assign(members, p), o.NodeID, "partition %d", p)
			require.Positive(c, o.Epoch, "partition %d", p)
		}
		for _, n := range nodes {
			owned := n.r.Owned()
			for p, o := range st.Owners {
				e, ok := owned[p]
				require.Equal(c, o.NodeID == n.id, ok, "node %s partition %d", n.id, p)
				if ok {
					require.Equal(c, o.Epoch, e, "node %s partition %d", n.id, p)
				}
			}
		}
	}, waitFor, tick)
	return st
}

// sampler calls every node's Owned in a tight loop from one goroutine, so
// its samples are totally ordered in time, and records for each (node,
// partition, epoch) the first and last sample that showed it. A node's
// ownership of a partition at one epoch is one interval, so two nodes whose
// recorded intervals for a partition overlap owned it at the same time.
type sampler struct {
	nodes  []*node
	stopc  chan struct{}
	donec  chan struct{}
	rounds atomic.Int64
	seen   map[claim]span
}

type claim struct {
	node  string
	p     int
	epoch int64
}

type span struct{ first, last int64 }

func startSampler(nodes []*node) *sampler {
	s := &sampler{nodes: nodes, stopc: make(chan struct{}), donec: make(chan struct{}), seen: map[claim]span{}}
	go func() {
		defer close(s.donec)
		var seq int64
		for {
			select {
			case <-s.stopc:
				return
			default:
			}
			for _, n := range s.nodes {
				seq++
				for p, e := range n.r.Owned() {
					c := claim{n.id, p, e}
					sp, ok := s.seen[c]
					if !ok {
						sp.first = seq
					}
					sp.last = seq
					s.seen[c] = sp
				}
			}
			s.rounds.Add(1)
		}
	}()
	return s
}

// stop ends sampling and fails t if two nodes ever owned one partition at
// once.
func (s *sampler) stop(t *testing.T) {
	t.Helper()
	close(s.stopc)
	<-s.donec
	byPartition := map[int][]claim{}
	for c := range s.seen {
		byPartition[c.p] = append(byPartition[c.p], c)
	}
	for p, cs := range byPartition {
		for i, a := range cs {
			for _, b := range cs[i+1:] {
				if a.node == b.node {
					continue
				}
				sa, sb := s.seen[a], s.seen[b]
				require.False(t, sa.first <= sb.last && sb.first <= sa.last,
					"partition %d owned by %s (epoch %d, samples %v) and %s (epoch %d, samples %v) at once",
					p, a.node, a.epoch, sa, b.node, b.epoch, sb)
			}
		}
	}
	t.Logf("sampler: %d rounds", s.rounds.Load())
}

func TestNewValidation(t *testing.T) {
	t.Parallel()
	cli := &clientv3.Client{} // never used by New
	tests := []struct {
		name    string
		opts    Options
		wantErr bool
		wantTTL int64
		wantP   int
	}{
		{name: "defaults", opts: Options{Client: cli, NodeID: "n"}, wantTTL: 2, wantP: 256},
		{name: "ttl rounded up", opts: Options{Client: cli, NodeID: "n", LeaseTTL: 1500 * time.Millisecond, Partitions: 8}, wantTTL: 2, wantP: 8},
		{name: "ttl at least 1s", opts: Options{Client: cli, NodeID: "n", LeaseTTL: time.Nanosecond}, wantTTL: 1, wantP: 256},
		{name: "no client", opts: Options{NodeID: "n"}, wantErr: true},
		{name: "no node id", opts: Options{Client: cli}, wantErr: true},
		{name: "prefix without slash", opts: Options{Client: cli, NodeID: "n", Prefix: "/x"}, wantErr: true},
		{name: "negative partitions", opts: Options{Client: cli, NodeID: "n", Partitions: -1}, wantErr: true},
		{name: "negative ttl", opts: Options{Client: cli, NodeID: "n", LeaseTTL: -time.Second}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := New(tt.opts)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantTTL, r.ttlSeconds)
			require.Equal(t, tt.wantP, r.Partitions())
			require.Equal(t, DefaultPrefix, r.prefix)
			require.Empty(t, r.Owned())
			require.False(t, r.Holds(0, 1))
		})
	}
}

func TestMargin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ttl, want time.Duration
	}{
		{ttl: time.Second, want: 200 * time.Millisecond},
		{ttl: 2 * time.Second, want: 200 * time.Millisecond},
		{ttl: 5 * time.Second, want: 500 * time.Millisecond},
		{ttl: 300 * time.Millisecond, want: 150 * time.Millisecond}, // capped at TTL/2
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, margin(tt.ttl), "ttl %s", tt.ttl)
	}
}

func TestMetricsRegistration(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	cli := &clientv3.Client{}
	_, err := New(Options{Client: cli, NodeID: "a", Metrics: reg})
	require.NoError(t, err)
	_, err = New(Options{Client: cli, NodeID: "b", Metrics: reg})
	require.Error(t, err, "a second ring on one registry must fail loudly")
}

// TestRingsConverge: three rings share all partitions, each owned by
// exactly one of them, as etcd and every ring see it.
func TestRingsConverge(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	reg := prometheus.NewRegistry()
	nodes := startNodes(t, c, []string{"node-a", "node-b", "node-c"}, func(o *Options) {
		if o.NodeID == "node-a" {
			o.Metrics = reg
		}
	})
	st := requireConverged(t, nodes)

	union := map[int]string{}
	for _, n := range nodes {
		select {
		case <-n.r.Ready():
		case <-time.After(waitFor):
			t.Fatalf("%s: Ready not closed", n.id)
		}
		for p := range n.r.Owned() {
			require.NotContains(t, union, p, "partition %d owned twice", p)
			union[p] = n.id
		}
	}
	require.Len(t, union, 256)
	require.Equal(t, []Member{
		{NodeID: "node-a", Address: "node-a:7000", JoinTime: st.Members[0].JoinTime},
		{NodeID: "node-b", Address: "node-b:7000", JoinTime: st.Members[1].JoinTime},
		{NodeID: "node-c", Address: "node-c:7000", JoinTime: st.Members[2].JoinTime},
	}, st.Members)
	for _, m := range st.Members {
		require.WithinDuration(t, time.Now(), m.JoinTime, time.Minute)
	}
	for p, e := range nodes[0].r.Owned() {
		require.True(t, nodes[0].r.Holds(p, e))
		require.False(t, nodes[0].r.Holds(p, e+1), "another epoch is not held")
	}
	require.Equal(t, float64(len(nodes[0].r.Owned())), testutil.ToFloat64(nodes[0].r.metrics.owned))
	require.Zero(t, testutil.ToFloat64(nodes[0].r.metrics.restarts))

	require.Error(t, nodes[0].r.Run(context.Background()), "Run twice")
}

// TestStopHandsOver: a ring that stops revokes its lease; the others take
// its partitions at once, at new epochs, and the rest stay untouched.
func TestStopHandsOver(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	nodes := startNodes(t, c, []string{"node-a", "node-b", "node-c"}, func(o *Options) { o.Partitions = 64 })
	before := requireConverged(t, nodes)

	// Drain Changes so the signal seen below is the stop's.
	select {
	case <-nodes[2].r.Changes():
	default:
	}
	start := time.Now()
	nodes[2].stop(t)
	require.Empty(t, nodes[2].r.Owned())
	select {
	case <-nodes[2].r.Changes():
	default:
		t.Fatal("stopping must signal Changes")
	}

	after := requireConverged(t, nodes[:2])
	t.Logf("takeover after stop: %s", time.Since(start))
	moved := 0
	for p := range before.Owners {
		b, a := before.Owners[p], after.Owners[p]
		if b.NodeID == "node-c" {
			moved++
			require.Greater(t, a.Epoch, b.Epoch, "partition %d", p)
		} else {
			require.Equal(t, b, a, "partition %d should not have moved", p)
		}
	}
	require.Positive(t, moved)
}

// TestCrashTakenOver: a ring that stops talking to etcd without revoking
// (its client closed, as if the process died) stops firing when its local
// deadline passes; the others take over after the server expires its lease,
// never while it still believes it owns anything.
func TestCrashTakenOver(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	nodes := startNodes(t, c, []string{"node-a", "node-b", "node-c"}, func(o *Options) {
		o.Partitions = 64
		o.LeaseTTL = time.Second
	})
	before := requireConverged(t, nodes)
	s := startSampler(nodes)

	start := time.Now()
	require.NoError(t, nodes[2].cli.Close())
	require.Eventually(t, func() bool { return len(nodes[2].r.Owned()) == 0 }, 2*time.Second, tick,
		"the crashed ring must stop firing within its TTL")
	t.Logf("crashed ring stopped firing after %s", time.Since(start))

	// TTL 1 s + etcd's expiry check (every 500 ms) + takeover.
	after := requireConvergedWithin(t, nodes[:2], 4*time.Second)
	t.Logf("takeover after crash: %s", time.Since(start))
	s.stop(t)
	for p := range before.Owners {
		if before.Owners[p].NodeID == "node-c" {
			require.Greater(t, after.Owners[p].Epoch, before.Owners[p].Epoch)
		}
	}
}

// requireConvergedWithin is requireConverged with a tighter bound, for the
// takeover promise.
func requireConvergedWithin(t *testing.T, nodes []*node, d time.Duration) State {
	t.Helper()
	members := nodeIDs(nodes)
	var st State
	require.Eventually(t, func() bool {
		var err error
		st, err = nodes[0].r.Snapshot(context.Background())
		if err != nil || len(st.Members) != len(nodes) {
			return false
		}
		for p, o := range st.Owners {
			if o.NodeID != Assign(members, p) {
				return false
			}
		}
		return true
	}, d, tick)
	return requireConverged(t, nodes)
}

// TestAddMemberUnderLoad: a fourth ring joins while the others' Owned is
// sampled in a tight loop: only the partitions it wins move (at new epochs),
// the rest keep their epochs, and no partition is ever owned twice.
func TestAddMemberUnderLoad(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	nodes := startNodes(t, c, []string{"node-a", "node-b", "node-c"}, nil)
	before := requireConverged(t, nodes)

	newcomer := newNode(t, c, "node-d", nil)
	all := append(slices.Clone(nodes), newcomer)
	s := startSampler(all)
	newcomer.start(t)
	after := requireConverged(t, all)
	// Keep sampling a little after convergence to catch late double claims.
	rounds := s.rounds.Load()
	require.Eventually(t, func() bool { return s.rounds.Load() > rounds+100 }, waitFor, tick)
	s.stop(t)

	moved := 0
	for p := range before.Owners {
		b, a := before.Owners[p], after.Owners[p]
		if a.NodeID == "node-d" {
			moved++
			require.Greater(t, a.Epoch, b.Epoch, "partition %d", p)
		} else {
			require.Equal(t, b, a, "partition %d moved between old members", p)
		}
	}
	require.Positive(t, moved)
	select {
	case <-newcomer.r.Ready():
	case <-time.After(waitFor):
		t.Fatal("newcomer never ready")
	}
}

// TestTakenAway: an owner key that vanishes or changes hands behind the
// ring's back is dropped at once; the ring re-acquires it once it is free.
func TestTakenAway(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	n := newNode(t, c, "node-a", func(o *Options) { o.Partitions = 4 }).start(t)
	before := requireConverged(t, []*node{n})
	ctx := t.Context()
	admin := c.Client(t)

	// Deleted: dropped, then re-acquired at a new epoch.
	_, err := admin.Delete(ctx, testPrefix+"partitions/0")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e, ok := n.r.Owned()[0]
		return ok && e > before.Owners[0].Epoch
	}, waitFor, tick)

	// Overwritten by someone else: dropped and left alone...
	_, err = admin.Put(ctx, testPrefix+"partitions/1", "intruder")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, ok := n.r.Owned()[1]
		return !ok
	}, waitFor, tick)
	require.False(t, n.r.Holds(1, before.Owners[1].Epoch))
	require.GreaterOrEqual(t, testutil.ToFloat64(n.r.metrics.fenced), 2.0)
	// ...until the intruder lets go.
	_, err = admin.Delete(ctx, testPrefix+"partitions/1")
	require.NoError(t, err)
	requireConverged(t, []*node{n})
}

// blockableKeepAlive makes a ring's keep-alives fail while blocked is set,
// as if etcd were unreachable, without touching etcd.
func blockableKeepAlive(r *Ring, blocked *atomic.Bool) {
	real := r.client.KeepAliveOnce
	r.keepAliveOnce = func(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
		if blocked.Load() {
			return nil, errors.New("keep-alive blocked by test")
		}
		return real(ctx, id)
	}
}

func (r *Ring) testDeadline() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deadline
}

func (r *Ring) testLease() clientv3.LeaseID {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sess == nil {
		return 0
	}
	return r.sess.lease
}

// TestDeadlineFakeClock: the local deadline is the clock reading taken
// before the last successful keep-alive, plus the TTL, minus the margin;
// once the clock reaches it Owned is empty and Holds false at once, while
// the lease is still alive on the server.
func TestDeadlineFakeClock(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	var blocked atomic.Bool
	n := newNode(t, c, "node-a", func(o *Options) {
		o.Partitions = 8
		o.LeaseTTL = 2 * time.Second
		o.Clock = clk
	})
	blockableKeepAlive(n.r, &blocked)
	n.start(t)

	const (
		ttl      = 2 * time.Second
		interval = ttl / 3
		margin   = 200 * time.Millisecond
	)
	first := requireConverged(t, []*node{n})
	require.Equal(t, t0.Add(ttl-margin), n.r.testDeadline(), "deadline from the grant")

	// The keep-alive loop waits one interval on the fake clock.
	require.Eventually(t, func() bool { return clk.Waiters() > 0 }, waitFor, tick)
	clk.Advance(interval)
	t1 := t0.Add(interval)
	require.Eventually(t, func() bool { return n.r.testDeadline().Equal(t1.Add(ttl - margin)) }, waitFor, tick,
		"deadline from the keep-alive sent at t1")
	require.Len(t, n.r.Owned(), 8)

	// From now on keep-alives fail.
	blocked.Store(true)
	deadline := t1.Add(ttl - margin)
	clk.Set(deadline.Add(-time.Nanosecond))
	owned := n.r.Owned()
	require.Len(t, owned, 8, "still owned just before the deadline")
	require.True(t, n.r.LeaseValid())
	require.True(t, Leadership{Ring: n.r, Name: "x"}.Valid())
	// The server still has the lease (its expiry is at least a margin
	// after our deadline)...
	lease := n.r.testLease()
	require.NotZero(t, lease)
	ttlResp, err := n.cli.TimeToLive(t.Context(), lease)
	require.NoError(t, err)
	require.Positive(t, ttlResp.TTL, "the lease must still be alive on the server")
	// ...but the ring stops firing the instant the clock reaches the
	// deadline, without waiting for any goroutine to notice.
	clk.Set(deadline)
	require.Empty(t, n.r.Owned(), "nothing owned at the deadline")
	require.False(t, n.r.LeaseValid(), "the lease is no longer certain")
	for p, e := range owned {
		require.False(t, n.r.Holds(p, e))
	}

	// The ring notices, drops the session (revoking the lease) and, once
	// keep-alives work again, starts over at new epochs.
	require.Eventually(t, func() bool { return testutil.ToFloat64(n.r.metrics.restarts) >= 1 }, waitFor, tick)
	ttlResp, err = n.cli.TimeToLive(t.Context(), lease)
	require.NoError(t, err)
	require.EqualValues(t, -1, ttlResp.TTL, "the old lease is revoked when the session is dropped")
	blocked.Store(false)
	require.Eventually(t, func() bool {
		if len(n.r.Owned()) == 8 {
			return true
		}
		clk.Advance(20 * time.Millisecond) // through the restart backoff
		return false
	}, waitFor, tick)
	for p, e := range n.r.Owned() {
		require.Greater(t, e, first.Owners[p].Epoch)
	}
}

// TestEtcdRestart: when etcd goes away every ring stops firing within its
// TTL; when it comes back (with the old leases restored) they rebuild,
// clearing their stale keys, and converge again.
func TestEtcdRestart(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	nodes := startNodes(t, c, []string{"node-a", "node-b"}, func(o *Options) {
		o.Partitions = 16
		o.LeaseTTL = time.Second
	})
	requireConverged(t, nodes)

	c.Stop()
	require.Eventually(t, func() bool {
		return len(nodes[0].r.Owned()) == 0 && len(nodes[1].r.Owned()) == 0
	}, 3*time.Second, tick)
	c.Restart(t)
	requireConverged(t, nodes)
}
