package ring

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/testkit/etcdtest"
)

// leaders tracks who runs a campaign's fn. When fn starts, every earlier
// leader's ctx must already be cancelled: otherwise two ran at once.
type leaders struct {
	mu       sync.Mutex
	active   map[string]context.Context
	starts   []string
	overlaps int
}

func (l *leaders) fn(id string) func(context.Context) {
	return func(ctx context.Context) {
		l.mu.Lock()
		for _, other := range l.active {
			if other.Err() == nil {
				l.overlaps++
			}
		}
		l.active[id] = ctx
		l.starts = append(l.starts, id)
		l.mu.Unlock()
		<-ctx.Done()
		l.mu.Lock()
		delete(l.active, id)
		l.mu.Unlock()
	}
}

func (l *leaders) snapshot() (starts []string, active, overlaps int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.starts...), len(l.active), l.overlaps
}

func TestCampaign(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	nodes := startNodes(t, c, []string{"node-a", "node-b", "node-c"}, func(o *Options) { o.Partitions = 8 })
	l := &leaders{active: map[string]context.Context{}}
	var wg sync.WaitGroup
	byID := map[string]*node{}
	stopCampaign := map[string]context.CancelFunc{}
	for _, n := range nodes {
		ctx, cancel := context.WithCancel(context.Background())
		byID[n.id], stopCampaign[n.id] = n, cancel
		wg.Go(func() {
			require.NoError(t, n.r.Campaign(ctx, "sweep", l.fn(n.id)))
		})
	}
	t.Cleanup(func() {
		for _, cancel := range stopCampaign {
			cancel()
		}
		wg.Wait()
	})

	require.Eventually(t, func() bool {
		starts, active, _ := l.snapshot()
		return len(starts) == 1 && active == 1
	}, waitFor, tick)
	starts, _, _ := l.snapshot()
	first := starts[0]

	// The leader's ring stops: its fn is cancelled, another node leads.
	byID[first].stop(t)
	require.Eventually(t, func() bool {
		starts, active, _ := l.snapshot()
		return len(starts) == 2 && active == 1
	}, waitFor, tick)
	starts, _, overlaps := l.snapshot()
	require.NotEqual(t, first, starts[1])
	require.Zero(t, overlaps, "two leaders at once")

	// The new leader's Campaign ctx ends while its ring keeps running: it
	// resigns and the last node leads.
	stopCampaign[starts[1]]()
	require.Eventually(t, func() bool {
		starts, active, _ := l.snapshot()
		return len(starts) == 3 && active == 1
	}, waitFor, tick)
	starts, _, overlaps = l.snapshot()
	require.NotContains(t, starts[:2], starts[2])
	require.Zero(t, overlaps)
}

// TestCampaignFnReturns: fn returning on its own resigns, and the election
// runs again (here on the only node).
func TestCampaignFnReturns(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	n := newNode(t, c, "node-a", func(o *Options) { o.Partitions = 4 }).start(t)
	var runs atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Leadership{Ring: n.r, Name: "sweep"}.Campaign(ctx, func(context.Context) { runs.Add(1) })
	}()
	require.Eventually(t, func() bool { return runs.Load() >= 3 }, waitFor, tick)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitFor):
		t.Fatal("Campaign did not return after cancel")
	}
	require.Error(t, n.r.Campaign(context.Background(), "", func(context.Context) {}))
}

// TestCampaignWaitsForSession: Campaign before Run waits, then leads.
func TestCampaignWaitsForSession(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	n := newNode(t, c, "node-a", func(o *Options) { o.Partitions = 4 })
	led := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- n.r.Campaign(ctx, "sweep", func(ctx context.Context) {
			close(led)
			<-ctx.Done()
		})
	}()
	n.start(t)
	select {
	case <-led:
	case <-time.After(waitFor):
		t.Fatal("never elected")
	}
	cancel()
	require.NoError(t, <-done)
}

// TestCampaignReturnsWhileEtcdIsDown: with etcd unreachable, a leader and a
// node waiting to lead both return from Campaign, and from Run, promptly
// when their contexts end, rather than retrying an etcd call forever (a
// trigger node would then never exit on SIGTERM).
func TestCampaignReturnsWhileEtcdIsDown(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	nodes := startNodes(t, c, []string{"node-a", "node-b"}, func(o *Options) { o.Partitions = 4 })
	var leading atomic.Int32
	type campaign struct {
		cancel context.CancelFunc
		done   chan error
	}
	campaigns := make([]campaign, len(nodes))
	for i, n := range nodes {
		ctx, cancel := context.WithCancel(context.Background())
		campaigns[i] = campaign{cancel: cancel, done: make(chan error, 1)}
		go func() {
			campaigns[i].done <- n.r.Campaign(ctx, "sweep", func(ctx context.Context) {
				leading.Add(1)
				<-ctx.Done()
				leading.Add(-1)
			})
		}()
	}
	// One node leads and the other waits for the leader's key to go.
	require.Eventually(t, func() bool { return leading.Load() == 1 }, waitFor, tick)
	time.Sleep(200 * time.Millisecond) // the follower is watching by now

	c.Stop()
	// Past the lease: both sessions end and campaign again, against a dead
	// etcd.
	time.Sleep(3 * time.Second)
	for i, n := range nodes {
		campaigns[i].cancel()
		n.cancel()
	}
	// Each etcd call Campaign and Run make is bounded by opTimeout.
	bound := opTimeout + 5*time.Second
	for i, n := range nodes {
		select {
		case err := <-campaigns[i].done:
			require.NoError(t, err)
		case <-time.After(bound):
			t.Fatalf("%s: Campaign did not return within %s of its context ending while etcd was down", n.id, bound)
		}
		n.stop(t)
	}
	require.Zero(t, leading.Load())
}
