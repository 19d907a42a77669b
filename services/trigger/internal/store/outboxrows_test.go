package store_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/libs/ring"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/services/trigger/internal/firing"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

// TestOutboxRowWrites counts the row writes that fired slots cost the
// trigger's tables, read from pg_stat_user_tables after the commits and
// the relay that publishes and deletes their outbox rows: the figures of
// ADR 0019. A node of a 256-partition ring commits the due jobs of the
// partitions it owns (all of them, or a third as one of three nodes), in
// commits of a burst's size (the engine's batch, 1,000 jobs) or of a
// steady state's (a few slots per partition). Every job is scheduled once
// a second, so each fires one slot per commit; job ids are random, so the
// slots fall on the partitions as they would. The relay's broker is a fake
// that confirms at once, so what is counted is the database's side only.
// The scenario with store.Options.OneRowPerMessage is the outbox as it was
// before ADR 0019. Run with -v for the figures.
func TestOutboxRowWrites(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a measurement: thousands of jobs")
	}
	const partitions = 256
	tests := []struct {
		name string
		// owned is how many partitions the node owns (0..owned-1), slots
		// the slots per commit, commits how many commits.
		owned, slots, commits int
		// priorities spread the jobs over the three priorities (three
		// routing keys) instead of one.
		priorities bool
		// oneRow: store.Options.OneRowPerMessage.
		oneRow bool
		// maxRowsPerSlot bounds the outbox rows per slot.
		maxRowsPerSlot float64
	}{
		{name: "burst, 1 node", owned: 256, slots: 1000, commits: 2, maxRowsPerSlot: 0.3},
		{name: "burst, 1 of 3 nodes", owned: 86, slots: 1000, commits: 2, maxRowsPerSlot: 0.1},
		{name: "burst, 1 of 3 nodes, 3 priorities", owned: 86, slots: 1000, commits: 2, priorities: true, maxRowsPerSlot: 0.3},
		{name: "steady, 1 of 3 nodes, 3 slots per partition", owned: 86, slots: 258, commits: 4, maxRowsPerSlot: 0.35},
		{name: "steady, 1 node, 1 slot per partition", owned: 256, slots: 256, commits: 4, maxRowsPerSlot: 0.7},
		{name: "burst, 8 partitions (full rows)", owned: 8, slots: 1000, commits: 2, maxRowsPerSlot: 0.03},
		{name: "burst, 1 of 3 nodes, a row per message", owned: 86, slots: 1000, commits: 1, oneRow: true, maxRowsPerSlot: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := measureOutboxRows(t, partitions, tt.owned, tt.slots, tt.commits, tt.priorities, tt.oneRow)
			per := func(n int64) string { return fmt.Sprintf("%.0f", float64(n)*1000/float64(w.slots)) }
			t.Logf("%s: %d slots in %d commits of %d over %d partitions: %d outbox rows of %d payload bytes (%d stored); per 1,000 slots: outbox %s inserted, %s deleted; its TOAST %s inserted, %s deleted; ledger %s inserted; jobs %s updated (%s HOT)",
				tt.name, w.slots, tt.commits, tt.slots, tt.owned, w.rows, w.rawBytes, w.storedBytes,
				per(w.outbox.ins), per(w.outbox.del), per(w.toast.ins), per(w.toast.del), per(w.ledger.ins), per(w.jobs.upd), per(w.jobs.hot))
			require.Equal(t, w.outbox.ins, w.outbox.del, "every outbox row deleted once")
			require.Zero(t, w.toast.ins, "no row goes to the TOAST table (outbox.GroupSchema)")
			require.EqualValues(t, w.slots, w.published, "every slot published once")
			require.LessOrEqual(t, float64(w.outbox.ins)/float64(w.slots), tt.maxRowsPerSlot)
		})
	}
}

// tableWrites are one table's counters of pg_stat_user_tables.
type tableWrites struct{ ins, upd, hot, del int64 }

type outboxRowWrites struct {
	slots, published int
	// rows, storedBytes and rawBytes are the outbox's rows after the
	// commits, and their payloads' average size as stored and raw.
	rows, storedBytes, rawBytes int
	outbox, toast, ledger, jobs tableWrites
}

// measureOutboxRows creates the jobs, commits their slots, runs a relay
// until the outbox is empty and reads the tables' counters once every
// connection is closed (a backend flushes its counters when it exits).
func measureOutboxRows(t *testing.T, partitions, owned, perCommit, commits int, priorities, oneRow bool) outboxRowWrites {
	t.Helper()
	ctx := t.Context()
	pool, schema := pgtest.New(t)
	migrations, err := store.Migrations()
	require.NoError(t, err)
	_, err = migrate.ApplyAll(ctx, pool, schema, migrations)
	require.NoError(t, err)
	st, err := store.New(store.Options{
		Pool: pool, Partitions: partitions, NodeID: testNode,
		DispatchExchange: testDispatch, ExecutionsExchange: testExecutions, OneRowPerMessage: oneRow,
	})
	require.NoError(t, err)
	require.NoError(t, st.EnsurePartitions(ctx, partitions))

	// Jobs of the owned partitions, every second.
	jobs := perCommit * commits
	createTime := ts("2030-03-10T10:00:00Z")
	prios := []registryv1.Priority{registryv1.Priority_PRIORITY_NORMAL}
	if priorities {
		prios = append(prios, registryv1.Priority_PRIORITY_HIGH, registryv1.Priority_PRIORITY_LOW)
	}
	var events []store.Event
	for len(events) < jobs {
		id := uuid.Must(uuid.NewRandom()).String()
		if ring.Partition(id, partitions) >= owned {
			continue
		}
		job := newJob(createTime, func(j *registryv1.Job) {
			j.Id = id
			j.Priority = prios[rand.N(len(prios))]
			j.Schedule = &registryv1.Schedule{Kind: &registryv1.Schedule_Interval{Interval: &registryv1.Interval{Every: durationpb.New(time.Second)}}}
		})
		events = append(events, store.Event{Event: created(job)})
	}
	for chunk := range slices.Chunk(events, 500) {
		_, err := st.ApplyBatch(ctx, chunk, createTime)
		require.NoError(t, err)
	}
	ownedParts := make([]int, owned)
	var fence []firing.Fence
	for p := range ownedParts {
		ownedParts[p] = p
		fence = append(fence, firing.Fence{Partition: p, Epoch: 1})
	}
	due, err := st.DueJobs(ctx, wholeLoads(ownedParts), ts("2100-01-01T00:00:00Z"), jobs)
	require.NoError(t, err)
	require.Len(t, due, jobs)
	rand.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })

	// The counters before the firing (the jobs' creation wrote jobs).
	before := readTableWrites(t, schema)
	var w outboxRowWrites
	for batch := range slices.Chunk(due, perCommit) {
		advances := make([]firing.Advance, len(batch))
		for i, d := range batch {
			advances[i] = firing.Advance{Due: d, Slots: []firing.Slot{{Nominal: d.NextFire, Kind: firing.KindScheduled}}, To: d.NextFire.Add(time.Second)}
		}
		res, err := st.Commit(ctx, fence, advances, batch[0].NextFire)
		require.NoError(t, err)
		require.Len(t, res.Advanced, len(batch))
		w.slots += len(batch)
	}

	// What the rows hold: stored (pg_column_size: compressed, or a TOAST
	// pointer) and raw payload bytes.
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), coalesce(avg(pg_column_size(payload)), 0)::int, coalesce(avg(octet_length(payload)), 0)::int FROM outbox`).
		Scan(&w.rows, &w.storedBytes, &w.rawBytes))

	pub := &confirmingPublisher{}
	relay, err := outbox.NewRelay(outbox.RelayOptions{
		Pool: pool, Publisher: pub, Ownership: allOwned(owned), Lanes: 4, PollInterval: 10 * time.Millisecond,
		Pack: func(topic string) bool { return strings.HasPrefix(topic, testDispatch+"|") },
	})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = relay.Run(rctx) })
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n))
		return n == 0
	}, 60*time.Second, 20*time.Millisecond, "the relay drains the outbox")
	stop()
	wg.Wait()
	w.published = int(pub.messages.Load())
	pool.Close()

	// Every backend that wrote has exited (or is exiting): wait until the
	// counters settle.
	var after map[string]tableWrites
	require.Eventually(t, func() bool {
		got := readTableWrites(t, schema)
		settled := maps.Equal(got, after)
		after = got
		return settled && got["outbox"].ins == got["outbox"].del
	}, 30*time.Second, 300*time.Millisecond, "the counters settle")
	diff := func(table string) tableWrites {
		a, b := after[table], before[table]
		return tableWrites{a.ins - b.ins, a.upd - b.upd, a.hot - b.hot, a.del - b.del}
	}
	w.outbox, w.toast, w.ledger, w.jobs = diff("outbox"), diff("outbox_toast"), diff("ledger"), diff("jobs")
	return w
}

// readTableWrites reads the schema's tables' counters on a connection of
// its own, the ledger's partitions summed as "ledger".
func readTableWrites(t *testing.T, schema string) map[string]tableWrites {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), pgtest.URL())
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	// The outbox's TOAST table too (as "outbox_toast"): a row whose
	// payload is stored out of line writes its chunks there.
	rows, err := conn.Query(t.Context(), `
		SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables WHERE schemaname = $1
		UNION ALL
		SELECT c.relname || '_toast', s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd, s.n_tup_del
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_stat_all_tables s ON s.relid = c.reltoastrelid
		WHERE n.nspname = $1 AND c.relname = 'outbox'`, schema)
	require.NoError(t, err)
	out := map[string]tableWrites{}
	var (
		name string
		tw   tableWrites
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &tw.ins, &tw.upd, &tw.hot, &tw.del}, func() error {
		if strings.HasPrefix(name, "ledger") {
			name = "ledger" // the ledger is partitioned by day: its partitions' sum
		}
		sum := out[name]
		out[name] = tableWrites{sum.ins + tw.ins, sum.upd + tw.upd, sum.hot + tw.hot, sum.del + tw.del}
		return nil
	})
	require.NoError(t, err)
	return out
}

// confirmingPublisher confirms every message at once and counts the
// messages it was given, a packed batch's one by one.
type confirmingPublisher struct{ messages atomic.Int64 }

func (p *confirmingPublisher) Publish(_ string, msgs ...*message.Message) error {
	_, err := p.PublishInOrder(nil, msgs)
	return err
}

func (p *confirmingPublisher) PublishInOrder(_ []string, msgs []*message.Message) (int, error) {
	for _, m := range msgs {
		n := 1
		if broker.IsBatch(m) {
			inner, err := broker.Unpack(m)
			if err != nil {
				return 0, err
			}
			n = len(inner)
		}
		p.messages.Add(int64(n))
	}
	return len(msgs), nil
}

func (p *confirmingPublisher) Close() error { return nil }

// allOwned owns partitions 0..n-1 at epoch 1, forever.
type allOwned int

func (n allOwned) Owned() map[int]int64 {
	out := make(map[int]int64, n)
	for p := range int(n) {
		out[p] = 1
	}
	return out
}

func (n allOwned) Holds(p int, epoch int64) bool { return p < int(n) && epoch == 1 }
