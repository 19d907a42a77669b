package outbox

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/amqptest"
)

// fakeLeadership leads whenever lead is set, and is Valid while valid is.
type fakeLeadership struct {
	valid   atomic.Bool
	leading chan struct{} // receives once per fn call
}

func (f *fakeLeadership) Campaign(ctx context.Context, fn func(context.Context)) error {
	f.leading <- struct{}{}
	fn(ctx)
	return nil
}

func (f *fakeLeadership) Valid() bool { return f.valid.Load() }

func TestRelayWithLeadershipPublishesOnlyWhileValid(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	top := newTopology(t)
	pub := &fakePublisher{next: newPublisher(t, amqptest.URL(), top.exchange)}
	lead := &fakeLeadership{leading: make(chan struct{}, 1)}
	r, reg := newRelay(t, RelayOptions{Pool: pool, Publisher: pub, Leadership: lead, PollInterval: 10 * time.Millisecond})
	runRelay(t, r)
	<-lead.leading
	require.Eventually(t, func() bool { return metric(t, reg, "outbox_leader") == 1 }, 10*time.Second, 10*time.Millisecond)

	// A leader whose lease may have lapsed (a frozen process that just
	// resumed) publishes nothing, however long it polls.
	msgs := seqMessages("lease", 5, 4)
	write(t, pool, msgs...)
	r.Notify()
	require.Never(t, func() bool { return pub.calls.Load() > 0 }, 300*time.Millisecond, 20*time.Millisecond)
	require.Equal(t, len(msgs), countRows(t, pool), "the rows wait for a valid leader")

	lead.valid.Store(true)
	r.Notify()
	waitEmpty(t, pool, 30*time.Second)
	require.Zero(t, checkOrder(t, msgs, amqptest.Drain(t, top.queue)))
}
