package outbox

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"context"
	"crypto/rand"
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
)

func TestNewRelayValidates(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	pub := &fakePublisher{}
	tests := []struct {
		name string
		opts RelayOptions
	}{
		{"no pool", RelayOptions{Publisher: pub}},
		{"no publisher", RelayOptions{Pool: pool}},
		{"negative batch", RelayOptions{Pool: pool, Publisher: pub, BatchSize: -1}},
		{"negative lanes", RelayOptions{Pool: pool, Publisher: pub, Lanes: -1}},
		{"negative shards", RelayOptions{Pool: pool, Publisher: pub, Shards: -1}},
		{"shards without ownership", RelayOptions{Pool: pool, Publisher: pub, Shards: 2}},
		{"negative poll", RelayOptions{Pool: pool, Publisher: pub, PollInterval: -time.Second}},
		{"negative max poll", RelayOptions{Pool: pool, Publisher: pub, MaxPollInterval: -time.Second}},
		{"negative backoff", RelayOptions{Pool: pool, Publisher: pub, Backoff: -time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewRelay(tt.opts)
			require.Error(t, err)
		})
	}

	t.Run("metrics registered twice", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		_, err := NewRelay(RelayOptions{Pool: pool, Publisher: pub, Metrics: reg})
		require.NoError(t, err)
		_, err = NewRelay(RelayOptions{Pool: pool, Publisher: pub, Metrics: reg})
		require.Error(t, err)
	})

	t.Run("Run twice", func(t *testing.T) {
		t.Parallel()
		r, _ := newRelay(t, RelayOptions{Pool: pool, Publisher: pub})
		runRelay(t, r)
		require.Eventually(t, func() bool { return r.running.Load() }, 5*time.Second, 10*time.Millisecond)
		require.Error(t, r.Run(context.Background()))
	})
}

func TestRelayPublishesRows(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	top := newTopology(t)
	r, reg := newRelay(t, RelayOptions{Pool: pool, Publisher: newPublisher(t, amqptest.URL(), top.exchange)})

	msgs := []Message{
		{AggregateID: "job-1", RoutingKey: "job.created", MessageID: "id-1", Payload: []byte(`{"n":1}`),
			Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x-tenant": "t1"}},
		{AggregateID: "job-2", RoutingKey: "job.deleted", MessageID: "id-2", Payload: []byte{0xff, 0}},
		{AggregateID: "job-1", RoutingKey: "dispatch.requested", MessageID: "id-3"},
	}
	write(t, pool, msgs...)
	stop := runRelay(t, r)
	r.Notify()
	waitEmpty(t, pool, 10*time.Second)
	stop()

	// Every row was confirmed before it was deleted, so the queue holds
	// exactly the published messages now.
	got := amqptest.Drain(t, top.queue)
	require.Len(t, got, len(msgs))
	byID, rowIDs := map[string]int{}, map[string]bool{}
	for i, d := range got {
		byID[d.MessageId] = i
		rowID, ok := d.Headers[RowIDHeader].(string)
		require.True(t, ok, "every message names its outbox row")
		require.False(t, rowIDs[rowID], "distinct rows, distinct row ids")
		rowIDs[rowID] = true
	}
	for _, m := range msgs {
		i, ok := byID[m.MessageID]
		require.True(t, ok, "message %s missing", m.MessageID)
		d := got[i]
		require.Equal(t, top.exchange, d.Exchange)
		require.Equal(t, m.RoutingKey, d.RoutingKey)
		require.Equal(t, uint8(2), d.DeliveryMode, "persistent")
		require.Equal(t, string(m.Payload), string(d.Body))
		require.Equal(t, m.MessageID, d.Headers["_watermill_message_uuid"])
		for k, v := range m.Headers {
			require.Equal(t, v, d.Headers[k], "header %s", k)
		}
	}
	// job-1's two messages keep their order.
	require.Less(t, byID["id-1"], byID["id-3"])
	require.Equal(t, float64(len(msgs)), metric(t, reg, "outbox_published_total"))
	require.Zero(t, metric(t, reg, "outbox_publish_errors_total"))
	require.Zero(t, metric(t, reg, "outbox_leader"), "released on stop")
}

func TestRelayPreservesOrderPerAggregate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		batchSize int
		lanes     int
		// grouped: written by WriteGrouped over 4 partitions, each
		// transaction's rows holding up to 25 messages (with ownership:
		// shards reading the partitions).
		grouped, owned bool
	}{
		{name: "default lanes, several batches", batchSize: 128},
		{name: "one lane", batchSize: 1000, lanes: 1},
		{name: "more lanes than aggregates", lanes: 64},
		{name: "grouped rows, several batches", batchSize: 8, grouped: true},
		{name: "grouped rows, owned partitions in shards", batchSize: 8, grouped: true, owned: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := testPool(t)
			opts := RelayOptions{BatchSize: tt.batchSize, Lanes: tt.lanes}
			if tt.grouped {
				pool = partitionedPool(t)
			}
			if tt.owned {
				opts.Ownership, opts.Shards = newOwnership(map[int]int64{0: 1, 1: 1, 2: 1, 3: 1}), 2
			}
			top := newTopology(t)
			opts.Pool, opts.Publisher = pool, newPublisher(t, amqptest.URL(), top.exchange)
			r, _ := newRelay(t, opts)
			// 20 aggregates x 50 messages, interleaved, written by 10
			// transactions of 100 while the relay runs, so batches cut
			// across transactions and aggregates.
			msgs := seqMessages("ord", 20, 50)
			if tt.grouped {
				partitioned(msgs, 4)
			}
			runRelay(t, r)
			for i := 0; i < len(msgs); i += 100 {
				writeWith(tt.grouped)(t, pool, msgs[i:i+100]...)
				r.Notify()
			}
			got := amqptest.Consume(t, top.queue, len(msgs), 30*time.Second)
			require.Zero(t, checkOrder(t, msgs, got), "duplicates in the happy path")
		})
	}
}

func TestRelayRolledBackTransactionPublishesNothing(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	top := newTopology(t)
	r, _ := newRelay(t, RelayOptions{Pool: pool, Publisher: newPublisher(t, amqptest.URL(), top.exchange)})
	ctx := context.Background()

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, Write(ctx, tx, Message{AggregateID: "a", RoutingKey: "job.created", MessageID: "rolled-back"}))
	require.NoError(t, tx.Rollback(ctx))
	write(t, pool, Message{AggregateID: "a", RoutingKey: "job.created", MessageID: "committed"})

	stop := runRelay(t, r)
	waitEmpty(t, pool, 10*time.Second)
	stop()
	got := amqptest.Drain(t, top.queue)
	require.Len(t, got, 1)
	require.Equal(t, "committed", got[0].MessageId)
}

func TestRelayNotifyWakesIdleRelay(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	top := newTopology(t)
	// An hour-long poll: only Notify can deliver the second row in time.
	r, _ := newRelay(t, RelayOptions{Pool: pool, Publisher: newPublisher(t, amqptest.URL(), top.exchange), PollInterval: time.Hour})

	write(t, pool, Message{AggregateID: "a", RoutingKey: "job.created", MessageID: "first"})
	runRelay(t, r)
	waitEmpty(t, pool, 10*time.Second) // the relay is idle now

	write(t, pool, Message{AggregateID: "a", RoutingKey: "job.created", MessageID: "second"})
	r.Notify()
	got := amqptest.Consume(t, top.queue, 2, 10*time.Second)
	require.Equal(t, "first", got[0].MessageId)
	require.Equal(t, "second", got[1].MessageId)
}

// TestRelaySpacesOutIdlePolls: polls that find nothing space out up to
// MaxPollInterval, and a row no Notify announced is still found by one.
func TestRelaySpacesOutIdlePolls(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	top := newTopology(t)
	r, reg := newRelay(t, RelayOptions{Pool: pool, Publisher: newPublisher(t, amqptest.URL(), top.exchange),
		PollInterval: 5 * time.Millisecond, MaxPollInterval: 80 * time.Millisecond})
	runRelay(t, r)
	require.Eventually(t, func() bool { return metric(t, reg, "outbox_reads_total") > 0 }, 10*time.Second, time.Millisecond)
	start := metric(t, reg, "outbox_reads_total")
	time.Sleep(time.Second)
	// Polling every 5 ms would be 200 reads; spaced out to 80 ms, about 15.
	require.Less(t, metric(t, reg, "outbox_reads_total")-start, 40.0, "idle polls are spaced out")

	write(t, pool, Message{AggregateID: "a", RoutingKey: "job.created", MessageID: "unannounced"})
	got := amqptest.Consume(t, top.queue, 1, 10*time.Second)
	require.Equal(t, "unannounced", got[0].MessageId)
}

func TestRelayBrokerUnreachable(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	// Port 1 refuses connections: the publisher never gets a connection.
	pub := newPublisher(t, "amqp://guest:guest@127.0.0.1:1/", "outbox-test-unreachable")
	r, reg := newRelay(t, RelayOptions{Pool: pool, Publisher: pub})
	runRelay(t, r)

	msgs := seqMessages("down", 5, 4)
	write(t, pool, msgs...) // writes succeed with the broker down
	r.Notify()

	require.Eventually(t, func() bool {
		return metric(t, reg, "outbox_publish_errors_total") >= 3
	}, 10*time.Second, 10*time.Millisecond, "relay keeps retrying")
	require.Equal(t, len(msgs), countRows(t, pool), "rows stay until published")
	require.Zero(t, metric(t, reg, "outbox_published_total"))
	require.Equal(t, float64(len(msgs)), metric(t, reg, "outbox_pending"))
	require.Eventually(t, func() bool { return metric(t, reg, "outbox_lag_seconds") > 0 },
		10*time.Second, 10*time.Millisecond)

	write(t, pool, seqMessages("down-more", 2, 2)...) // and keep succeeding
	require.Equal(t, len(msgs)+4, countRows(t, pool))
}

func TestRelayRetriesFailedPublishes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fail func(call int64) (fail, afterPublish bool)
		// dups reports whether duplicates are allowed: a failure after
		// the broker took the message (a lost confirm) republishes it,
		// and so does one within a grouped row (its confirmed messages
		// go again with the rest).
		dups bool
		// grouped: written by WriteGrouped over 4 partitions.
		grouped bool
	}{
		{
			name:    "grouped rows, scattered failures stop lanes mid-row",
			fail:    func(call int64) (bool, bool) { return call < 400 && call%37 == 5, false },
			dups:    true,
			grouped: true,
		},
		{
			name:    "grouped rows, failures after the broker took the message",
			fail:    func(call int64) (bool, bool) { return call < 400 && call%29 == 3, true },
			dups:    true,
			grouped: true,
		},
		{
			name: "first 5 publishes fail",
			fail: func(call int64) (bool, bool) { return call < 5, false },
		},
		{
			name: "scattered failures stop lanes mid-batch",
			fail: func(call int64) (bool, bool) { return call < 400 && call%37 == 5, false },
		},
		{
			name: "failures after the broker took the message",
			fail: func(call int64) (bool, bool) { return call < 400 && call%29 == 3, true },
			dups: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := testPool(t)
			msgs := seqMessages("retry", 20, 15)
			if tt.grouped {
				pool = partitionedPool(t)
				partitioned(msgs, 4)
			}
			top := newTopology(t)
			pub := &fakePublisher{next: newPublisher(t, amqptest.URL(), top.exchange), fail: tt.fail}
			r, reg := newRelay(t, RelayOptions{Pool: pool, Publisher: pub, BatchSize: 100})

			for i := 0; i < len(msgs); i += 50 {
				writeWith(tt.grouped)(t, pool, msgs[i:i+50]...)
			}
			stop := runRelay(t, r)
			waitEmpty(t, pool, 30*time.Second)
			stop()

			got := amqptest.Drain(t, top.queue)
			dups := checkOrder(t, msgs, got)
			if tt.grouped {
				requireRepublishesFlagged(t, got)
			}
			if !tt.dups {
				require.Zero(t, dups)
				require.Len(t, got, len(msgs))
			}
			require.Positive(t, pub.failures.Load())
			require.Equal(t, float64(pub.failures.Load()), metric(t, reg, "outbox_publish_errors_total"))
		})
	}
}

func TestRelayRecoversFromBrokerOutage(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	top := newTopology(t)
	proxy := amqptest.NewProxy(t, true) // the broker is "down" at start
	r, reg := newRelay(t, RelayOptions{Pool: pool, Publisher: newPublisher(t, proxy.URL(), top.exchange), BatchSize: 200})
	runRelay(t, r)

	first := seqMessages("outage-a", 10, 20)
	write(t, pool, first...)
	require.Eventually(t, func() bool { return metric(t, reg, "outbox_publish_errors_total") > 0 },
		10*time.Second, 10*time.Millisecond)
	require.Equal(t, len(first), countRows(t, pool))

	proxy.Up()
	waitEmpty(t, pool, 30*time.Second)

	// Connection loss while publishing: cut every connection once some of
	// the second wave went out. watermill-amqp reconnects; rows whose
	// publish failed stay and go out after it.
	second := seqMessages("outage-b", 10, 100)
	published := metric(t, reg, "outbox_published_total")
	write(t, pool, second...)
	r.Notify()
	require.Eventually(t, func() bool { return metric(t, reg, "outbox_published_total") >= published+100 },
		10*time.Second, time.Millisecond)
	proxy.Sever()
	waitEmpty(t, pool, 60*time.Second)

	got := amqptest.Drain(t, top.queue)
	checkOrder(t, append(first, second...), got) // duplicates are allowed here
}

func TestRelaySingleLeader(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	top := newTopology(t)
	real := newPublisher(t, amqptest.URL(), top.exchange)
	pubA, pubB := &fakePublisher{next: real}, &fakePublisher{next: real}
	ra, regA := newRelay(t, RelayOptions{Pool: pool, Publisher: pubA})
	rb, regB := newRelay(t, RelayOptions{Pool: pool, Publisher: pubB})
	stopA := runRelay(t, ra)
	require.Eventually(t, func() bool { return metric(t, regA, "outbox_leader") == 1 }, 10*time.Second, 10*time.Millisecond)
	runRelay(t, rb)

	first := seqMessages("leader-a", 10, 30)
	write(t, pool, first...)
	ra.Notify()
	waitEmpty(t, pool, 30*time.Second)
	require.Equal(t, int64(len(first)), pubA.calls.Load())
	require.Zero(t, pubB.calls.Load(), "the standby relay published")
	require.Zero(t, metric(t, regB, "outbox_leader"))

	// The leader stops: the standby takes over.
	stopA()
	second := seqMessages("leader-b", 10, 30)
	write(t, pool, second...)
	require.Eventually(t, func() bool { return metric(t, regB, "outbox_leader") == 1 }, 10*time.Second, 10*time.Millisecond)
	waitEmpty(t, pool, 30*time.Second)
	require.Equal(t, int64(len(first)), pubA.calls.Load())
	require.Equal(t, int64(len(second)), pubB.calls.Load())

	got := amqptest.Drain(t, top.queue)
	require.Zero(t, checkOrder(t, append(first, second...), got))
}

func TestRelayReacquiresLockAfterLockConnectionDies(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	top := newTopology(t)
	var b [8]byte
	_, _ = rand.Read(b[:])
	key := int64(binary.LittleEndian.Uint64(b[:]) | 1) // non-zero
	r, reg := newRelay(t, RelayOptions{Pool: pool, Publisher: newPublisher(t, amqptest.URL(), top.exchange), LockKey: key})
	runRelay(t, r)

	admin := connectAdmin(t)
	holder := func() int {
		var pid int
		err := admin.QueryRow(context.Background(), `
			SELECT coalesce(max(pid), 0) FROM pg_locks
			WHERE locktype = 'advisory' AND granted AND objsubid = 1
			  AND ((classid::bigint << 32) | objid::bigint) = $1`, key).Scan(&pid)
		require.NoError(t, err)
		return pid
	}
	var old int
	require.Eventually(t, func() bool { old = holder(); return old != 0 }, 10*time.Second, 10*time.Millisecond)

	_, err := admin.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, old)
	require.NoError(t, err)
	require.Eventually(t, func() bool { h := holder(); return h != 0 && h != old }, 10*time.Second, 10*time.Millisecond,
		"relay re-acquires the lock on a new connection")
	// PostgreSQL shows the lock granted a moment before the relay's
	// tryLock returns and it raises the gauge.
	require.Eventually(t, func() bool { return metric(t, reg, "outbox_leader") == 1 }, 10*time.Second, 10*time.Millisecond,
		"the relay reports itself the leader again")

	msgs := seqMessages("relock", 3, 3)
	write(t, pool, msgs...)
	r.Notify()
	got := amqptest.Consume(t, top.queue, len(msgs), 10*time.Second)
	require.Zero(t, checkOrder(t, msgs, got))
}

// stallPublisher blocks every Publish until released, counting calls in
// flight, to observe a relay stopping mid-batch.
type stallPublisher struct {
	inFlight atomic.Int64
	release  chan struct{}
}

func (s *stallPublisher) Publish(string, ...*message.Message) error {
	s.inFlight.Add(1)
	<-s.release
	return nil
}

func (s *stallPublisher) Close() error { return nil }

func TestRelayStopDrainsInFlightAndDeletesConfirmed(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	pub := &stallPublisher{release: make(chan struct{})}
	r, reg := newRelay(t, RelayOptions{Pool: pool, Publisher: pub, Lanes: 4})
	msgs := seqMessages("drain", 4, 10)
	write(t, pool, msgs...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	// Stop while publishes are in flight, and only then let them finish.
	require.Eventually(t, func() bool { return pub.inFlight.Load() > 0 }, 10*time.Second, time.Millisecond)
	cancel()
	close(pub.release)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancellation")
	}

	// Run waited for the in-flight publishes and deleted their rows before
	// returning; no publish started after the stop.
	published := int(metric(t, reg, "outbox_published_total"))
	require.Positive(t, published)
	require.Less(t, published, len(msgs))
	require.Equal(t, int(pub.inFlight.Load()), published)
	require.Equal(t, len(msgs)-published, countRows(t, pool))
}

// dueHistogram reads outbox_due_to_confirm_seconds from reg: its count,
// sum and cumulative count by upper bound.
func dueHistogram(t testing.TB, reg *prometheus.Registry) (count uint64, sum float64, le map[float64]uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "outbox_due_to_confirm_seconds" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		le = map[float64]uint64{}
		for _, b := range h.GetBucket() {
			le[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		return h.GetSampleCount(), h.GetSampleSum(), le
	}
	t.Fatal("outbox_due_to_confirm_seconds not registered")
	return 0, 0, nil
}

func TestRelayMeasuresDueToConfirm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// pipelined: the publisher is an InOrderPublisher (one chunk for
		// the lane); otherwise each row is its own confirmed publish.
		pipelined bool
		// grouped: the messages share a row of WriteGrouped.
		grouped bool
	}{
		{name: "pipelined", pipelined: true},
		{name: "one publish at a time"},
		{name: "grouped, pipelined", pipelined: true, grouped: true},
		{name: "grouped, one publish at a time", grouped: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := testPool(t)
			top := newTopology(t)
			var pub message.Publisher = newPublisher(t, amqptest.URL(), top.exchange)
			if !tt.pipelined {
				pub = &fakePublisher{next: pub}
			}
			// The confirms happen at confirmed on the injected clock,
			// whatever the wall clock says.
			confirmed := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
			var nowCalls atomic.Int64
			r, reg := newRelay(t, RelayOptions{Pool: pool, Publisher: pub, Now: func() time.Time {
				nowCalls.Add(1)
				return confirmed
			}})

			// One aggregate, so one lane publishes all rows in order.
			msg := func(id string, due time.Time) Message {
				return Message{AggregateID: "job-1", RoutingKey: "dispatch.normal", MessageID: id, DueAt: due,
					Headers: map[string]string{"x-tenant": "t1"}}
			}
			writeWith(tt.grouped)(t, pool,
				msg("late-40ms", confirmed.Add(-40*time.Millisecond)),
				msg("no-due", time.Time{}),
				msg("late-3s", confirmed.Add(-3*time.Second)),
				msg("early", confirmed.Add(time.Second)), // a clock corrected backwards
			)
			// Not written by Write: a malformed value is dropped, not
			// observed, and does not stop the publish.
			_, err := pool.Exec(t.Context(), `INSERT INTO outbox (aggregate_id, routing_key, message_id, payload, headers)
				VALUES ('job-1', 'dispatch.normal', 'malformed', '', jsonb_build_object($1::text, 'soon', 'x-tenant', 't1'))`, DueAtHeader)
			require.NoError(t, err)
			if tt.grouped {
				require.Equal(t, 2, countRows(t, pool), "the four messages in one row, and the malformed one")
			}

			stop := runRelay(t, r)
			// A row is deleted after its confirm was observed.
			waitEmpty(t, pool, 10*time.Second)
			stop()
			got := amqptest.Drain(t, top.queue)
			require.Len(t, got, 5)
			for _, d := range got {
				require.NotContains(t, d.Headers, DueAtHeader, "message %s: the due time is the relay's, not the consumer's", d.MessageId)
				require.Equal(t, "t1", d.Headers["x-tenant"], "message %s keeps its own headers", d.MessageId)
			}

			count, sum, le := dueHistogram(t, reg)
			require.EqualValues(t, 3, count, "the rows with a valid due time, each once")
			require.InDelta(t, 3.04, sum, 1e-9, "0.04 s + 3 s + 0 for the early one")
			require.EqualValues(t, 1, le[.001], "the early row observes 0")
			require.EqualValues(t, 2, le[.05])
			require.EqualValues(t, 2, le[2.5])
			require.EqualValues(t, 3, le[5])
			if tt.pipelined {
				require.EqualValues(t, 1, nowCalls.Load(), "the clock is read once per confirmed chunk")
			} else {
				require.EqualValues(t, 3, nowCalls.Load(), "once per confirm of a row with a due time")
			}
		})
	}
}

// TestRelayPacksRowsOfAPackableTopic: consecutive rows of a lane bound for
// a topic that Pack accepts share broker messages; every row is published
// once, in order per aggregate, with its own id and headers, and deleted;
// rows of other topics go alone.
func TestRelayPacksRowsOfAPackableTopic(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	top := newTopology(t)
	r, reg := newPackingRelay(t, pool, top, 2)
	packable := seqMessages("p", 10, 20) // 200 rows
	for i := range packable {
		packable[i].RoutingKey = "dispatch.normal"
		packable[i].Headers = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	}
	alone := []Message{{AggregateID: "job-x", RoutingKey: "job.created", MessageID: "alone-1", Payload: []byte("x#0")}}
	write(t, pool, append(packable, alone...)...)
	stop := runRelay(t, r)
	r.Notify()
	waitEmpty(t, pool, 20*time.Second)
	stop()
	require.Equal(t, float64(len(packable)+1), metric(t, reg, "outbox_published_total"), "rows, not broker messages, are counted")

	var unpacked []amqp091.Delivery
	brokerMessages, batches := 0, 0
	for _, d := range amqptest.Drain(t, top.queue) {
		brokerMessages++
		msg, err := broker.Marshaler{}.Unmarshal(d)
		require.NoError(t, err)
		if !broker.IsBatch(msg) {
			unpacked = append(unpacked, d)
			continue
		}
		batches++
		inner, err := broker.Unpack(msg)
		require.NoError(t, err)
		for _, m := range inner {
			require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", m.Metadata.Get("traceparent"), "the row's headers travel inside the batch")
			require.NotEmpty(t, m.Metadata.Get(RowIDHeader))
			unpacked = append(unpacked, amqp091.Delivery{MessageId: m.UUID, Body: m.Payload})
		}
	}
	require.Positive(t, batches)
	require.Less(t, brokerMessages, len(packable)/10, "packed: far fewer broker messages than rows")
	require.Zero(t, checkOrder(t, append(packable, alone...), unpacked), "no row published twice")
}

// TestRelayPublishesGroupedRows: the messages of grouped rows (beside
// rows of one message, as other services write them) are each published
// once, in order per aggregate, with their own id, headers, row header
// and due time, and counted as messages; the rows are deleted.
func TestRelayPublishesGroupedRows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		pipelined, pack bool
	}{
		{name: "packed", pipelined: true, pack: true},
		{name: "pipelined", pipelined: true},
		{name: "one publish at a time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := partitionedPool(t)
			top := newTopology(t)
			var pub message.Publisher = newPublisher(t, amqptest.URL(), top.exchange)
			if !tt.pipelined {
				pub = &fakePublisher{next: pub}
			}
			opts := RelayOptions{
				Pool: pool, Publisher: pub, Shards: 2, Lanes: 4,
				Ownership: newOwnership(map[int]int64{0: 1, 1: 1, 2: 1, 3: 1}),
			}
			if tt.pack {
				opts.Pack = func(topic string) bool { return strings.HasPrefix(topic, "dispatch.") }
			}
			r, reg := newRelay(t, opts)

			// 30 aggregates x 10 messages over 4 partitions, written by 5
			// transactions, each with a row of every partition; and 12
			// rows of one message each, as another service writes them.
			const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			grouped := partitioned(seqMessages("grp", 30, 10), 4)
			due := time.Now()
			for i := range grouped {
				grouped[i].RoutingKey = "dispatch.normal"
				grouped[i].Headers = map[string]string{"traceparent": traceparent, "x-tenant": "t1"}
				grouped[i].DueAt = due
			}
			single := partitioned(seqMessages("single", 4, 3), 4)
			for i := 0; i < len(grouped); i += 60 {
				writeGrouped(t, pool, grouped[i:i+60]...)
			}
			write(t, pool, single...)
			require.Equal(t, 5*4+len(single), countRows(t, pool), "a row per transaction and partition")
			require.EqualValues(t, len(grouped)+len(single), pendingMessages(t, pool))

			stop := runRelay(t, r)
			r.Notify()
			waitEmpty(t, pool, 30*time.Second)
			stop()

			got := unpackDeliveries(t, amqptest.Drain(t, top.queue))
			require.Zero(t, checkOrder(t, append(slices.Clone(grouped), single...), got), "every message once, in order per aggregate")
			requireRepublishesFlagged(t, got)
			for _, d := range got {
				require.NotContains(t, d.Headers, DueAtHeader)
				require.NotContains(t, d.Headers, GroupHeader)
				rowID, _ := d.Headers[RowIDHeader].(string)
				if strings.HasPrefix(d.MessageId, "grp-") {
					require.Equal(t, traceparent, d.Headers["traceparent"], "message %s keeps its trace context", d.MessageId)
					require.Equal(t, "t1", d.Headers["x-tenant"])
					require.Contains(t, rowID, "/", "message %s of a grouped row: row/index", d.MessageId)
				} else {
					require.NotContains(t, rowID, "/", "a row of one message keeps its bare id")
				}
			}
			require.Equal(t, float64(len(grouped)+len(single)), metric(t, reg, "outbox_published_total"), "messages, not rows")
			count, _, _ := dueHistogram(t, reg)
			require.EqualValues(t, len(grouped), count, "each grouped message's due time observed once")
		})
	}
}

// controlledPublisher is an InOrderPublisher whose calls the test
// controls: call n (from 0) confirms the first confirm(n) messages and
// fails after them (-1: confirms all), after waiting for the channel
// gate(n) returns, if any, to close.
type controlledPublisher struct {
	next    *broker.Publisher
	confirm func(call int64) int
	gate    func(call int64) <-chan struct{}
	calls   atomic.Int64
	// returned receives the number of every call that returned.
	returned chan int64
}

func (p *controlledPublisher) Publish(topic string, msgs ...*message.Message) error {
	panic("the relay pipelines through PublishInOrder")
}

func (p *controlledPublisher) PublishInOrder(topics []string, msgs []*message.Message) (int, error) {
	call := p.calls.Add(1) - 1
	defer func() { p.returned <- call }()
	if p.gate != nil {
		if ch := p.gate(call); ch != nil {
			<-ch
		}
	}
	n := len(msgs)
	if p.confirm != nil {
		if c := p.confirm(call); c >= 0 {
			n = c
		}
	}
	confirmed, err := p.next.PublishInOrder(topics[:n], msgs[:n])
	if err != nil || n == len(msgs) {
		return confirmed, err
	}
	return confirmed, errInjected
}

func (p *controlledPublisher) Close() error { return nil }

// TestRelayDeletesAGroupedRowOnlyOnceEveryMessageIsConfirmed: a row whose
// publish failed after part of its messages were confirmed stays, and is
// published again whole, every message flagged, before it is deleted;
// the rows after it in its lane wait.
func TestRelayDeletesAGroupedRowOnlyOnceEveryMessageIsConfirmed(t *testing.T) {
	t.Parallel()
	pool := partitionedPool(t)
	top := newTopology(t)
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	pub := &controlledPublisher{
		next: newPublisher(t, amqptest.URL(), top.exchange),
		// The warm-up goes through; then the first chunk of the grouped
		// rows has 10 of its messages confirmed and fails; the retry
		// waits for the test.
		confirm:  func(call int64) int { return map[bool]int{true: 10, false: -1}[call == 1] },
		gate:     func(call int64) <-chan struct{} { return map[bool]chan struct{}{true: release}[call == 2] },
		returned: make(chan int64, 100),
	}
	r, reg := newRelay(t, RelayOptions{Pool: pool, Publisher: pub, Ownership: newOwnership(map[int]int64{1: 1})})
	runRelay(t, r)
	t.Cleanup(releaseOnce) // registered after runRelay's stop, so it runs before it
	writeGrouped(t, pool, Message{AggregateID: "warm-up", RoutingKey: "job.updated", MessageID: "warm-up", Partition: 1})
	r.Notify()
	waitEmpty(t, pool, 10*time.Second)
	require.Len(t, amqptest.Drain(t, top.queue), 1)

	// A row of 40, then a row of 20 in the same partition: one lane, one
	// chunk of 60, 10 of which are confirmed. One transaction writes both,
	// so that no poll of the relay sees the first row alone.
	first := seqMessages("first", 40, 1)
	second := seqMessages("second", 20, 1)
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	for _, msgs := range [][]Message{first, second} {
		for i := range msgs {
			msgs[i].Partition = 1
		}
		require.NoError(t, WriteGrouped(t.Context(), tx, msgs...))
	}
	require.NoError(t, tx.Commit(t.Context()))
	require.Equal(t, 2, countRows(t, pool))
	r.Notify()
	require.EqualValues(t, 0, <-pub.returned, "the warm-up's call")
	require.EqualValues(t, 1, <-pub.returned, "the failed call")
	require.Eventually(t, func() bool { return pub.calls.Load() == 3 }, 10*time.Second, time.Millisecond, "the retry")
	// The retry is held, so the failed cycle is over: it deleted nothing.
	require.Equal(t, 2, countRows(t, pool), "a row confirmed in part is not deleted, nor are the rows after it")
	require.Equal(t, float64(1+10), metric(t, reg, "outbox_published_total"), "the warm-up and the confirmed messages")
	releaseOnce()
	waitEmpty(t, pool, 10*time.Second)

	got := amqptest.Drain(t, top.queue)
	require.Len(t, got, 10+40+20, "the first row's 10 confirmed messages again, with the rest")
	requireRepublishesFlagged(t, got)
	with, without := flagged(got)
	require.ElementsMatch(t, messageIDs(first[:10]), without, "first publishes")
	require.ElementsMatch(t, messageIDs(append(slices.Clone(first), second...)), with, "the whole cycle again, flagged")
	require.Equal(t, 10, checkOrder(t, append(slices.Clone(first), second...), got))
}

// TestRelayStopsAtAnUndecodableGroupedRow: a grouped row whose payload is
// not a MessageBatch stops its lane like a failed publish: the rows before
// it are published, the ones after it in its lane wait, and the relay
// reports it.
func TestRelayStopsAtAnUndecodableGroupedRow(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	top := newTopology(t)
	r, reg := newRelay(t, RelayOptions{Pool: pool, Publisher: newPublisher(t, amqptest.URL(), top.exchange)})
	before, after := seqMessages("before", 3, 1), seqMessages("after", 3, 1)
	writeGrouped(t, pool, before...)
	_, err := pool.Exec(t.Context(), `INSERT INTO outbox (aggregate_id, routing_key, message_id, payload, headers)
		VALUES ($1, 'job.updated', 'broken', '\xffff', jsonb_build_object($2::text, '2'))`, PartitionAggregate(0), GroupHeader)
	require.NoError(t, err)
	writeGrouped(t, pool, after...)
	runRelay(t, r)
	require.Eventually(t, func() bool { return metric(t, reg, "outbox_publish_errors_total") >= 2 }, 10*time.Second, 10*time.Millisecond,
		"every cycle stops at it")
	require.Equal(t, 2, countRows(t, pool), "the broken row and the row after it")
	require.Zero(t, checkOrder(t, before, amqptest.Drain(t, top.queue)))

	_, err = pool.Exec(t.Context(), `DELETE FROM outbox WHERE message_id = 'broken'`)
	require.NoError(t, err)
	r.Notify()
	waitEmpty(t, pool, 10*time.Second)
	require.Zero(t, checkOrder(t, after, amqptest.Drain(t, top.queue)))
}

// TestFetchBoundsTheMessagesOfAPoll: a poll takes rows while their
// messages fit BatchSize, a grouped row counting each of its own, and at
// least one row; a poll cut short says so (full), so the next one follows
// at once. The rows it leaves are read by the next poll as if never read.
func TestFetchBoundsTheMessagesOfAPoll(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	for i := range 5 {
		writeGrouped(t, pool, seqMessages(fmt.Sprintf("poll%d", i), 1, 8)...)
	}
	require.Equal(t, 5, countRows(t, pool))
	for _, tt := range []struct {
		batch, rows int
		full        bool
	}{
		{batch: 4, rows: 1, full: true}, // one row of 8: more than the bound, but at least one
		{batch: 8, rows: 1, full: true},
		{batch: 17, rows: 2, full: true},
		{batch: 40, rows: 5, full: false},
		{batch: 1000, rows: 5, full: false},
	} {
		r, _ := newRelay(t, RelayOptions{Pool: pool, Publisher: &fakePublisher{}, BatchSize: tt.batch})
		rows, full, _, err := r.fetch(t.Context(), nil)
		require.NoError(t, err)
		require.Len(t, rows, tt.rows, "BatchSize %d", tt.batch)
		require.Equal(t, tt.full, full, "BatchSize %d", tt.batch)
		for _, rw := range rows {
			require.Equal(t, 8, messagesOfRow(rw.headers))
		}
	}
}

// TestRelayPacksASmallCycleIntoOneBrokerMessage: a cycle's messages are
// spread over one lane per 64 of them, not over every lane, so a cycle of
// 40 packable messages of 40 aggregates is one broker message (hashed over
// the 16 lanes it would be up to 16), in order, each once.
func TestRelayPacksASmallCycleIntoOneBrokerMessage(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	top := newTopology(t)
	r, _ := newPackingRelay(t, pool, top, 16)
	msgs := seqMessages("agg", 40, 1)
	for i := range msgs {
		msgs[i].RoutingKey = "dispatch.normal"
	}
	write(t, pool, msgs...)
	stop := runRelay(t, r)
	waitEmpty(t, pool, 20*time.Second)
	stop()

	deliveries := amqptest.Drain(t, top.queue)
	require.Equal(t, 1, len(deliveries), "one cycle of 40 messages: one lane, one broker message")
	msg, err := broker.Marshaler{}.Unmarshal(deliveries[0])
	require.NoError(t, err)
	inner, err := broker.Unpack(msg)
	require.NoError(t, err)
	var unpacked []amqp091.Delivery
	for _, m := range inner {
		unpacked = append(unpacked, amqp091.Delivery{MessageId: m.UUID, Body: m.Payload})
	}
	require.Zero(t, checkOrder(t, msgs, unpacked), "no message published twice")
	require.Len(t, unpacked, len(msgs))
}

// TestIntoLanesKeepsAggregatesTogetherAndFillsLanesInTurn: every row of
// an aggregate is in one lane, in id order; a cycle uses one lane per 64
// messages (grouped rows counting theirs), up to the most, each about an
// equal share.
func TestIntoLanesKeepsAggregatesTogetherAndFillsLanesInTurn(t *testing.T) {
	t.Parallel()
	var rows []row
	for i := range 150 {
		rows = append(rows, row{id: int64(i), aggregateID: fmt.Sprintf("agg-%d", i%40)})
	}
	rows = append(rows, row{id: 150, aggregateID: "grouped", headers: map[string]string{GroupHeader: "60"}})
	lanes := intoLanes(rows, 16)
	require.Len(t, lanes, 4, "210 messages: four lanes of at most 64")
	laneOf := map[string]int{}
	total := 0
	for i, lane := range lanes {
		messages := 0
		for j, rw := range lane {
			if j > 0 {
				require.Less(t, lane[j-1].id, rw.id, "a lane keeps id order")
			}
			if l, ok := laneOf[rw.aggregateID]; ok {
				require.Equal(t, l, i, "aggregate %s in two lanes", rw.aggregateID)
			}
			laneOf[rw.aggregateID] = i
			messages += messagesOfRow(rw.headers)
		}
		require.LessOrEqual(t, messages, 53+60, "lane %d holds its share (53) and at most one more aggregate", i)
		total += messages
	}
	require.Equal(t, 210, total)

	require.Len(t, intoLanes(rows[:40], 16), 1, "40 messages: one lane")
	require.Len(t, intoLanes(rows, 2), 2, "never more than the most")
}
