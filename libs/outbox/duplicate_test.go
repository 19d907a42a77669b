package outbox

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
)

// flagged splits deliveries by PossibleDuplicateHeader: the message ids
// published with it, and those without.
func flagged(got []amqp091.Delivery) (with, without []string) {
	for _, d := range got {
		if d.Headers[PossibleDuplicateHeader] == "true" {
			with = append(with, d.MessageId)
		} else {
			without = append(without, d.MessageId)
		}
	}
	return with, without
}

func messageIDs(msgs []Message) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.MessageID
	}
	return ids
}

// testLockCheck is the relays' LockCheckInterval in these tests. Twice it
// is the margin after the lock was taken during which a former leader may
// still publish (rows from before it are flagged); it also bounds the lock
// connection's ping, and shorter, a ping slower than it on a loaded
// machine drops the lock: the rows after it are then read in a new tenure,
// flagged, which the tests would take for a fault.
const testLockCheck = 500 * time.Millisecond

// warmUp has r publish one row, then waits past its tenure's margin, so
// that rows written afterwards are first publishes.
func warmUp(t *testing.T, r *Relay, pool *pgxpool.Pool, queue string) {
	t.Helper()
	write(t, pool, Message{AggregateID: "warm-up", RoutingKey: "job.updated", MessageID: "warm-up"})
	r.Notify()
	waitEmpty(t, pool, 10*time.Second)
	time.Sleep(2*testLockCheck + 100*time.Millisecond) // past the margin
	require.Len(t, amqptest.Drain(t, queue), 1)
}

func TestPossibleDuplicateOnRowsFromBeforeTheLock(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	top := newTopology(t)
	r, reg := newRelay(t, RelayOptions{Pool: pool, Publisher: newPublisher(t, amqptest.URL(), top.exchange), LockCheckInterval: testLockCheck})

	before := seqMessages("before", 4, 3)
	write(t, pool, before...)
	runRelay(t, r)
	waitEmpty(t, pool, 10*time.Second)
	with, without := flagged(amqptest.Drain(t, top.queue))
	require.ElementsMatch(t, messageIDs(before), with, "a former leader (or this relay before a restart) may have published them")
	require.Empty(t, without)

	time.Sleep(2*testLockCheck + 100*time.Millisecond) // past the margin
	after := seqMessages("after", 4, 3)
	write(t, pool, after...)
	r.Notify()
	waitEmpty(t, pool, 10*time.Second)
	with, without = flagged(amqptest.Drain(t, top.queue))
	require.Empty(t, with)
	require.ElementsMatch(t, messageIDs(after), without, "first publishes of this relay's own tenure")
	require.Equal(t, float64(len(before)), metric(t, reg, "outbox_possible_duplicates_total"))
}

func TestPossibleDuplicateAfterAFailedCycle(t *testing.T) {
	t.Parallel()
	// grouped: the three messages share a row, which the failure cuts
	// after its first message's publish.
	for _, grouped := range []bool{false, true} {
		t.Run(map[bool]string{false: "rows", true: "grouped"}[grouped], func(t *testing.T) {
			t.Parallel()
			testPossibleDuplicateAfterAFailedCycle(t, grouped)
		})
	}
}

func testPossibleDuplicateAfterAFailedCycle(t *testing.T, grouped bool) {
	pool := testPool(t)
	top := newTopology(t)
	// Call 1 (the first after the warm-up row) reaches the broker but its
	// confirm is lost.
	pub := &fakePublisher{next: newPublisher(t, amqptest.URL(), top.exchange),
		fail: func(call int64) (bool, bool) { return call == 1, true }}
	r, _ := newRelay(t, RelayOptions{Pool: pool, Publisher: pub, LockCheckInterval: testLockCheck})
	runRelay(t, r)
	warmUp(t, r, pool, top.queue)

	msgs := seqMessages("failed", 1, 3) // one aggregate: one lane, in order
	writeWith(grouped)(t, pool, msgs...)
	if grouped {
		require.Equal(t, 1, countRows(t, pool))
	}
	r.Notify()
	waitEmpty(t, pool, 10*time.Second)
	got := amqptest.Drain(t, top.queue)
	require.Equal(t, int64(1), pub.failures.Load())
	// The first row went out twice: first as a first publish, then again,
	// flagged, with the rest of its cycle, which the relay read again.
	require.Len(t, got, 4)
	require.Equal(t, msgs[0].MessageID, got[0].MessageId)
	require.Nil(t, got[0].Headers[PossibleDuplicateHeader])
	for _, d := range got[1:] {
		require.Equal(t, "true", d.Headers[PossibleDuplicateHeader], "message %s", d.MessageId)
	}
	require.Equal(t, msgs[0].MessageID, got[1].MessageId)

	later := seqMessages("later", 2, 2)
	writeWith(grouped)(t, pool, later...)
	r.Notify()
	waitEmpty(t, pool, 10*time.Second)
	with, without := flagged(amqptest.Drain(t, top.queue))
	require.Empty(t, with, "rows after the failed cycle's are first publishes again")
	require.ElementsMatch(t, messageIDs(later), without)
}

func TestPossibleDuplicateOnANewEpoch(t *testing.T) {
	t.Parallel()
	pool := partitionedPool(t)
	top := newTopology(t)
	owner := newOwnership(map[int]int64{1: 7})
	r, _ := newRelay(t, RelayOptions{Pool: pool, Publisher: newPublisher(t, amqptest.URL(), top.exchange), Ownership: owner})
	inPartition := func(msgs []Message) []Message {
		for i := range msgs {
			msgs[i].Partition = 1
		}
		return msgs
	}

	first := inPartition(seqMessages("epoch7-old", 2, 2))
	write(t, pool, first...)
	runRelay(t, r)
	waitEmpty(t, pool, 10*time.Second)
	with, _ := flagged(amqptest.Drain(t, top.queue))
	require.ElementsMatch(t, messageIDs(first), with, "written before the relay read its partition")

	own := inPartition(seqMessages("epoch7-own", 2, 2))
	write(t, pool, own...)
	r.Notify()
	waitEmpty(t, pool, 10*time.Second)
	with, without := flagged(amqptest.Drain(t, top.queue))
	require.Empty(t, with)
	require.ElementsMatch(t, messageIDs(own), without)

	// The partition changed hands (and came back): another owner may have
	// published what waits now.
	owner.set(map[int]int64{1: 9})
	handedOver := inPartition(seqMessages("epoch9", 2, 2))
	write(t, pool, handedOver...)
	r.Notify()
	waitEmpty(t, pool, 10*time.Second)
	with, _ = flagged(amqptest.Drain(t, top.queue))
	require.ElementsMatch(t, messageIDs(handedOver), with)
}

// slowFirstPublisher holds its first publish past staleAfter.
type slowFirstPublisher struct {
	fakePublisher
}

func (p *slowFirstPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.calls.Load() == 1 { // the first after the warm-up row
		time.Sleep(staleAfter + 200*time.Millisecond)
	}
	return p.fakePublisher.Publish(topic, msgs...)
}

func TestPossibleDuplicateWhenPublishedLongAfterTheRead(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	top := newTopology(t)
	pub := &slowFirstPublisher{fakePublisher{next: newPublisher(t, amqptest.URL(), top.exchange)}}
	r, _ := newRelay(t, RelayOptions{Pool: pool, Publisher: pub, LockCheckInterval: testLockCheck})
	runRelay(t, r)
	warmUp(t, r, pool, top.queue)

	// One lane: the second and third rows go out more than staleAfter
	// after the read, as after a freeze, when the ownership they were read
	// under may have moved on.
	msgs := seqMessages("stale", 1, 3)
	write(t, pool, msgs...)
	r.Notify()
	waitEmpty(t, pool, 10*time.Second)
	got := amqptest.Drain(t, top.queue)
	require.Len(t, got, 3)
	require.Nil(t, got[0].Headers[PossibleDuplicateHeader])
	require.Equal(t, "true", got[1].Headers[PossibleDuplicateHeader])
	require.Equal(t, "true", got[2].Headers[PossibleDuplicateHeader])
}

// TestPossibleDuplicateOnAGroupedRowRepublishedAfterACrash: a relay that
// crashed between the broker's confirms of a grouped row's messages and
// the row's DELETE (the DELETE fails here, and the relay stops) leaves the
// row, and the partition's next owner publishes it again whole: every
// message flagged, under the same row headers. The first publishes were
// not flagged.
func TestPossibleDuplicateOnAGroupedRowRepublishedAfterACrash(t *testing.T) {
	t.Parallel()
	pool := partitionedPool(t)
	top := newTopology(t)
	pub := newPublisher(t, amqptest.URL(), top.exchange)
	// A long backoff: after its failed DELETE the first relay waits
	// rather than publish the row again itself.
	first, _ := newRelay(t, RelayOptions{Pool: pool, Publisher: pub, Ownership: newOwnership(map[int]int64{1: 1}),
		Backoff: time.Hour, MaxBackoff: time.Hour})
	stopFirst := runRelay(t, first)
	warm := Message{AggregateID: "warm-up", RoutingKey: "job.updated", MessageID: "warm-up", Partition: 1}
	writeGrouped(t, pool, warm)
	first.Notify()
	waitEmpty(t, pool, 10*time.Second)
	require.Len(t, amqptest.Drain(t, top.queue), 1)

	_, err := pool.Exec(t.Context(), `
		CREATE FUNCTION crash_before_delete() RETURNS trigger LANGUAGE plpgsql AS
			$$ BEGIN RAISE EXCEPTION 'the relay crashed before its DELETE'; END $$;
		CREATE TRIGGER crash_before_delete BEFORE DELETE ON outbox
			FOR EACH STATEMENT EXECUTE FUNCTION crash_before_delete()`)
	require.NoError(t, err)
	msgs := seqMessages("crash", 5, 4)
	for i := range msgs {
		msgs[i].Partition = 1
	}
	writeGrouped(t, pool, msgs...)
	require.Equal(t, 1, countRows(t, pool))
	first.Notify()
	firstPublish := amqptest.Consume(t, top.queue, len(msgs), 10*time.Second)
	stopFirst()
	with, without := flagged(firstPublish)
	require.Empty(t, with)
	require.ElementsMatch(t, messageIDs(msgs), without, "first publishes")
	require.Equal(t, 1, countRows(t, pool), "the row outlived its confirms")

	_, err = pool.Exec(t.Context(), `DROP TRIGGER crash_before_delete ON outbox`)
	require.NoError(t, err)
	next, reg := newRelay(t, RelayOptions{Pool: pool, Publisher: pub, Ownership: newOwnership(map[int]int64{1: 2})})
	runRelay(t, next)
	waitEmpty(t, pool, 10*time.Second)
	again := amqptest.Drain(t, top.queue)
	with, without = flagged(again)
	require.Empty(t, without)
	require.ElementsMatch(t, messageIDs(msgs), with, "every message of the row again, flagged")
	require.Equal(t, float64(len(msgs)), metric(t, reg, "outbox_possible_duplicates_total"))
	all := append(firstPublish, again...)
	requireRepublishesFlagged(t, all)
	require.Equal(t, len(msgs), checkOrder(t, msgs, all))
}
