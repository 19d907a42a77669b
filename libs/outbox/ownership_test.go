package outbox

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
)

// fakeOwnership owns the partitions in its map, at their epochs; while
// lapsed, Owned still lists them but Holds denies them.
type fakeOwnership struct {
	mu     sync.Mutex
	owned  map[int]int64
	lapsed atomic.Bool
}

func newOwnership(owned map[int]int64) *fakeOwnership { return &fakeOwnership{owned: owned} }

func (f *fakeOwnership) Owned() map[int]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.owned)
}

func (f *fakeOwnership) Holds(p int, epoch int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.owned[p]
	return ok && e == epoch && !f.lapsed.Load()
}

func (f *fakeOwnership) set(owned map[int]int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.owned = owned
}

// partitionedPool is testPool with the partition column.
func partitionedPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool := testPool(t)
	_, err := pool.Exec(t.Context(), PartitionSchema())
	require.NoError(t, err)
	return pool
}

// partitioned spreads msgs over partitions by aggregate: aggregate "...-agg-N"
// goes to partition N mod partitions.
func partitioned(msgs []Message, partitions int) []Message {
	for i := range msgs {
		var n int
		_, err := fmt.Sscanf(msgs[i].AggregateID[strings.LastIndex(msgs[i].AggregateID, "-")+1:], "%d", &n)
		if err != nil {
			panic(err)
		}
		msgs[i].Partition = n % partitions
	}
	return msgs
}

// recordingPublisher remembers the partition of every row it publishes.
type recordingPublisher struct {
	next       message.Publisher
	partitions map[string]int // message id -> partition
	mu         sync.Mutex
	published  []string // message ids
}

func (p *recordingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.next.Publish(topic, msgs...); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.published = append(p.published, m.UUID)
	}
	return nil
}

func (p *recordingPublisher) Close() error { return nil }

func (p *recordingPublisher) publishedPartitions() map[int]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	counts := map[int]int{}
	for _, id := range p.published {
		counts[p.partitions[id]]++
	}
	return counts
}

func TestWriteStoresPartitions(t *testing.T) {
	t.Parallel()
	pool := partitionedPool(t)
	write(t, pool,
		Message{AggregateID: "a", RoutingKey: "k", MessageID: "m1", Partition: 7},
		Message{AggregateID: "b", RoutingKey: "k", MessageID: "m2"},
		Message{AggregateID: "c", RoutingKey: "k", MessageID: "m3", Partition: 255},
	)
	// A call whose messages all leave the partition 0 writes the default.
	write(t, pool, Message{AggregateID: "d", RoutingKey: "k", MessageID: "m4"})
	rows, err := pool.Query(t.Context(), `SELECT partition FROM outbox ORDER BY id`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	require.Equal(t, []int32{7, 0, 255, 0}, got)
}

func TestRelaysWithOwnershipPublishEachTheirOwnPartitions(t *testing.T) {
	t.Parallel()
	pool := partitionedPool(t)
	top := newTopology(t)
	const partitions = 8
	msgs := partitioned(seqMessages("own", 16, 5), partitions)
	byID := map[string]int{}
	for _, m := range msgs {
		byID[m.MessageID] = m.Partition
	}

	// Two relays on one table, as on two nodes: even partitions to one, odd
	// to the other, except partition 7, which nobody owns yet.
	evens, odds := newOwnership(map[int]int64{0: 1, 2: 1, 4: 1, 6: 1}), newOwnership(map[int]int64{1: 1, 3: 1, 5: 1})
	pubEven := &recordingPublisher{next: newPublisher(t, amqptest.URL(), top.exchange), partitions: byID}
	pubOdd := &recordingPublisher{next: newPublisher(t, amqptest.URL(), top.exchange), partitions: byID}
	even, _ := newRelay(t, RelayOptions{Pool: pool, Publisher: pubEven, Ownership: evens, Shards: 3})
	odd, _ := newRelay(t, RelayOptions{Pool: pool, Publisher: pubOdd, Ownership: odds, Shards: 3})
	write(t, pool, msgs...)
	runRelay(t, even)
	runRelay(t, odd)

	perPartition := len(msgs) / partitions
	require.Eventually(t, func() bool { return countRows(t, pool) == perPartition }, 30*time.Second, 20*time.Millisecond,
		"every owned partition published")
	require.Never(t, func() bool { return countRows(t, pool) < perPartition }, 300*time.Millisecond, 20*time.Millisecond,
		"partition 7 has no owner: its rows wait")
	require.Equal(t, map[int]int{0: perPartition, 2: perPartition, 4: perPartition, 6: perPartition}, pubEven.publishedPartitions())
	require.Equal(t, map[int]int{1: perPartition, 3: perPartition, 5: perPartition}, pubOdd.publishedPartitions())

	// Partition 7 is taken over: its rows go out through its new owner.
	odds.set(map[int]int64{1: 1, 3: 1, 5: 1, 7: 2})
	waitEmpty(t, pool, 30*time.Second)
	require.Equal(t, perPartition, pubOdd.publishedPartitions()[7])
	require.Zero(t, checkOrder(t, msgs, amqptest.Drain(t, top.queue)), "no row published twice")
}

func TestRelayWithOwnershipPublishesOnlyWhileItHolds(t *testing.T) {
	t.Parallel()
	for _, grouped := range []bool{false, true} {
		t.Run(map[bool]string{false: "rows", true: "grouped"}[grouped], func(t *testing.T) {
			t.Parallel()
			testRelayWithOwnershipPublishesOnlyWhileItHolds(t, grouped)
		})
	}
}

func testRelayWithOwnershipPublishesOnlyWhileItHolds(t *testing.T, grouped bool) {
	pool := partitionedPool(t)
	top := newTopology(t)
	pub := &fakePublisher{next: newPublisher(t, amqptest.URL(), top.exchange)}
	owner := newOwnership(map[int]int64{3: 5})
	// Owned still lists the partition, but the ownership lapsed since (a
	// frozen node that just resumed, its lease expired): nothing may go
	// out, however often it polls.
	owner.lapsed.Store(true)
	r, _ := newRelay(t, RelayOptions{Pool: pool, Publisher: pub, Ownership: owner, PollInterval: 10 * time.Millisecond})
	runRelay(t, r)

	msgs := seqMessages("held", 4, 3)
	for i := range msgs {
		msgs[i].Partition = 3
	}
	writeWith(grouped)(t, pool, msgs...)
	rows := len(msgs)
	if grouped {
		rows = 1
	}
	r.Notify()
	require.Never(t, func() bool { return pub.calls.Load() > 0 }, 300*time.Millisecond, 20*time.Millisecond)
	require.Equal(t, rows, countRows(t, pool), "the rows wait for an owner that holds the partition")

	owner.lapsed.Store(false)
	r.Notify()
	waitEmpty(t, pool, 30*time.Second)
	require.Zero(t, checkOrder(t, msgs, amqptest.Drain(t, top.queue)))
}

func TestRelayOwnedQueryReadsEachPartitionsIndexRange(t *testing.T) {
	t.Parallel()
	pool := partitionedPool(t)
	// A backlog in many partitions, and the planner's statistics of it.
	var msgs []Message
	for i := range 5000 {
		msgs = append(msgs, Message{AggregateID: fmt.Sprint("agg-", i), RoutingKey: "k", MessageID: fmt.Sprint("m-", i), Partition: i % 64})
	}
	write(t, pool, msgs...)
	_, err := pool.Exec(t.Context(), `ANALYZE outbox`)
	require.NoError(t, err)
	rows, err := pool.Query(t.Context(), `EXPLAIN (ANALYZE, FORMAT TEXT) `+selectOwnedSQL, 100, []int32{1, 4, 9, 33}, 50)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.Contains(t, plan, "on outbox_partition", plan)
	require.NotContains(t, plan, "Rows Removed by Filter", "no row of another partition is read: %s", plan)
}

func TestRelayWithOwnershipDrainsOnePartitionsBacklogWithoutWaiting(t *testing.T) {
	t.Parallel()
	pool := partitionedPool(t)
	top := newTopology(t)
	// Two partitions owned, so each may fill half of a batch of 200; only
	// one has rows (a backfill), 1,000 of them. A cycle that filled its
	// partition's share must start the next at once, not wait for a poll.
	r, _ := newRelay(t, RelayOptions{
		Pool: pool, Publisher: newPublisher(t, amqptest.URL(), top.exchange),
		Ownership: newOwnership(map[int]int64{1: 1, 2: 1}), BatchSize: 200, PollInterval: time.Hour,
	})
	msgs := seqMessages("backfill", 1, 1000)
	for i := range msgs {
		msgs[i].Partition = 1
	}
	write(t, pool, msgs...)
	runRelay(t, r)
	r.Notify()
	waitEmpty(t, pool, 20*time.Second)
	require.Zero(t, checkOrder(t, msgs, amqptest.Drain(t, top.queue)))
}

// lapsingOwnership is fakeOwnership whose Holds stops holding after
// holds calls that did.
type lapsingOwnership struct {
	*fakeOwnership
	holds atomic.Int64
}

func (l *lapsingOwnership) Holds(p int, epoch int64) bool {
	return l.fakeOwnership.Holds(p, epoch) && l.holds.Add(-1) >= 0
}

// TestRelayWithOwnershipStopsWithinAGroupedRowWhenItLosesThePartition:
// the ownership is checked before every chunk of 64 messages, whatever
// rows they come from, so a relay that loses its partition while a
// grouped row straddles two chunks publishes no more; the rows it
// confirmed in full are deleted, the one it confirmed in part is not, and
// the partition's next owner publishes it whole, every message flagged.
func TestRelayWithOwnershipStopsWithinAGroupedRowWhenItLosesThePartition(t *testing.T) {
	t.Parallel()
	pool := partitionedPool(t)
	top := newTopology(t)
	pub := newPublisher(t, amqptest.URL(), top.exchange)
	inPartition := func(msgs []Message) []Message {
		for i := range msgs {
			msgs[i].Partition = 3
		}
		return msgs
	}
	// Rows of 10, 64 and 40 messages: the first chunk is the first row and
	// 54 messages of the second.
	small, full, rest := inPartition(seqMessages("small", 10, 1)), inPartition(seqMessages("full", 64, 1)), inPartition(seqMessages("rest", 40, 1))
	writeGrouped(t, pool, small...)
	writeGrouped(t, pool, append(slices.Clone(full), rest...)...)
	require.Equal(t, 3, countRows(t, pool))

	owner := &lapsingOwnership{fakeOwnership: newOwnership(map[int]int64{3: 1})}
	owner.holds.Store(1)
	r, reg := newRelay(t, RelayOptions{Pool: pool, Publisher: pub, Ownership: owner})
	stop := runRelay(t, r)
	require.Eventually(t, func() bool { return countRows(t, pool) == 2 }, 10*time.Second, 10*time.Millisecond, "the first row is deleted")
	require.Never(t, func() bool { return countRows(t, pool) < 2 }, 300*time.Millisecond, 20*time.Millisecond,
		"the second row, published in part, and the third wait")
	stop()
	require.Equal(t, float64(64), metric(t, reg, "outbox_published_total"), "one chunk")
	firstOwner := amqptest.Drain(t, top.queue)
	require.Len(t, firstOwner, 64)

	next, _ := newRelay(t, RelayOptions{Pool: pool, Publisher: pub, Ownership: newOwnership(map[int]int64{3: 2})})
	runRelay(t, next)
	waitEmpty(t, pool, 10*time.Second)
	nextOwner := amqptest.Drain(t, top.queue)
	with, without := flagged(nextOwner)
	require.Empty(t, without)
	require.ElementsMatch(t, messageIDs(append(slices.Clone(full), rest...)), with, "the rows the first owner left, whole, flagged")
	all := append(firstOwner, nextOwner...)
	requireRepublishesFlagged(t, all)
	require.Equal(t, 54, checkOrder(t, append(append(slices.Clone(small), full...), rest...), all), "the second row's first 54 messages twice")
}
