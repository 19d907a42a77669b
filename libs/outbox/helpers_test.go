package outbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/postgres"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
)

// These helpers deliberately do not use libs/testkit/pgtest: that package is owned
// and evolved elsewhere, and the outbox tests need only a schema per test.

const defaultPostgresURL = "postgres://postgres@127.0.0.1:5432/cronmesh?sslmode=disable"

func postgresURL() string {
	if u := os.Getenv("CRONMESH_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return defaultPostgresURL
}

// testPool returns a pool whose search_path is a fresh schema t_<hex>
// holding the outbox table; t.Cleanup drops the schema.
func testPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	admin := connectAdmin(t)

	var b [8]byte
	_, _ = rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	_, err := admin.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		require.NoError(t, err)
	})

	cfg, err := pgxpool.ParseConfig(postgresURL())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	_, err = pool.Exec(ctx, Schema())
	require.NoError(t, err)
	return pool
}

// connectAdmin connects to the test database, creating it when missing, and
// closes the connection in t.Cleanup.
func connectAdmin(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, postgresURL())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "3D000" { // invalid_catalog_name
		require.NoError(t, postgres.EnsureDatabase(ctx, postgresURL()))
		conn, err = pgx.Connect(ctx, postgresURL())
	}
	if err != nil {
		t.Fatalf("PostgreSQL is unreachable at %s: %v\nThe tests need a running PostgreSQL: run `make test`, which starts it (or `make services`).",
			postgresURL(), err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// write commits msgs in one transaction.
func write(t testing.TB, pool *pgxpool.Pool, msgs ...Message) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after the commit
	require.NoError(t, Write(ctx, tx, msgs...))
	require.NoError(t, tx.Commit(ctx))
}

// writeGrouped commits msgs with WriteGrouped in one transaction.
func writeGrouped(t testing.TB, pool *pgxpool.Pool, msgs ...Message) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after the commit
	require.NoError(t, WriteGrouped(ctx, tx, msgs...))
	require.NoError(t, tx.Commit(ctx))
}

// writeWith is write or writeGrouped.
func writeWith(grouped bool) func(testing.TB, *pgxpool.Pool, ...Message) {
	if grouped {
		return writeGrouped
	}
	return write
}

// unpackDeliveries returns the messages of deliveries, a packed batch's
// (broker.Pack) one by one, as deliveries carrying their message id,
// body and headers, in order.
func unpackDeliveries(t testing.TB, got []amqp091.Delivery) []amqp091.Delivery {
	t.Helper()
	var out []amqp091.Delivery
	for _, d := range got {
		msg, err := broker.Marshaler{}.Unmarshal(d)
		require.NoError(t, err)
		if !broker.IsBatch(msg) {
			out = append(out, d)
			continue
		}
		inner, err := broker.Unpack(msg)
		require.NoError(t, err)
		for _, m := range inner {
			headers := amqp091.Table{}
			for k, v := range m.Metadata {
				headers[k] = v
			}
			out = append(out, amqp091.Delivery{MessageId: m.UUID, Body: m.Payload, Headers: headers, RoutingKey: d.RoutingKey, Exchange: d.Exchange})
		}
	}
	return out
}

// requireRepublishesFlagged asserts that every delivery of a message id
// after its first carries PossibleDuplicateHeader and the same
// RowIDHeader, and that distinct message ids have distinct row headers.
func requireRepublishesFlagged(t testing.TB, got []amqp091.Delivery) {
	t.Helper()
	rowOf := map[string]any{}
	idOf := map[any]string{}
	for _, d := range got {
		rowID := d.Headers[RowIDHeader]
		require.NotEmpty(t, rowID, "message %s names its outbox row", d.MessageId)
		if first, ok := rowOf[d.MessageId]; ok {
			require.Equal(t, "true", d.Headers[PossibleDuplicateHeader], "message %s published again without the flag", d.MessageId)
			require.Equal(t, first, rowID, "message %s published again under another row header", d.MessageId)
			continue
		}
		rowOf[d.MessageId] = rowID
		if other, ok := idOf[rowID]; ok {
			t.Fatalf("messages %s and %s share the row header %v", other, d.MessageId, rowID)
		}
		idOf[rowID] = d.MessageId
	}
}

func countRows(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox").Scan(&n))
	return n
}

// waitEmpty waits until the relay has published and deleted every row.
func waitEmpty(t testing.TB, pool *pgxpool.Pool, timeout time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return countRows(t, pool) == 0 }, timeout, 20*time.Millisecond,
		"outbox not drained")
}

// seqMessages returns aggregates x perAggregate messages interleaved
// (a0#0, a1#0, ..., a0#1, ...), payload "<aggregate>#<seq>".
func seqMessages(prefix string, aggregates, perAggregate int) []Message {
	msgs := make([]Message, 0, aggregates*perAggregate)
	for s := range perAggregate {
		for a := range aggregates {
			agg := fmt.Sprintf("%s-agg-%d", prefix, a)
			msgs = append(msgs, Message{
				AggregateID: agg,
				RoutingKey:  "job.updated",
				MessageID:   fmt.Sprintf("%s-%d-%d", prefix, a, s),
				Payload:     []byte(fmt.Sprintf("%s#%d", agg, s)),
			})
		}
	}
	return msgs
}

// checkOrder asserts that deliveries contain every message of want, and
// that per aggregate the first deliveries of each message id come in
// sequence order. It returns the number of duplicates.
func checkOrder(t testing.TB, want []Message, got []amqp091.Delivery) int {
	t.Helper()
	seen := map[string]bool{}
	next := map[string]int{}
	dups := 0
	for _, d := range got {
		if seen[d.MessageId] {
			dups++
			continue
		}
		seen[d.MessageId] = true
		agg, seqText, ok := strings.Cut(string(d.Body), "#")
		require.True(t, ok, "payload %q", d.Body)
		seq, err := strconv.Atoi(seqText)
		require.NoError(t, err)
		require.Equal(t, next[agg], seq, "aggregate %s out of order", agg)
		next[agg]++
	}
	for _, m := range want {
		require.True(t, seen[m.MessageID], "message %s never delivered", m.MessageID)
	}
	require.Len(t, seen, len(want))
	return dups
}

// runRelay runs r until the test ends or the returned stop is called; stop
// waits for Run to return and asserts it returned nil promptly.
func runRelay(t testing.TB, r *Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Relay.Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("Relay.Run did not return within 30s of cancellation")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// topology is an exchange with one queue bound with "#".
type topology struct {
	exchange, queue string
}

func newTopology(t testing.TB) topology {
	t.Helper()
	ex := amqptest.UniqueName(t, "outbox-test")
	return topology{exchange: ex, queue: amqptest.DeclareTopicQueue(t, ex, "#")}
}

// newPublisher returns a broker.Publisher for exchange via amqpURL, closed
// in t.Cleanup.
func newPublisher(t testing.TB, amqpURL, exchange string) *broker.Publisher {
	t.Helper()
	return newPublisherPool(t, amqpURL, exchange, 0)
}

// newPublisherPool is newPublisher with a channel pool size (0: default).
func newPublisherPool(t testing.TB, amqpURL, exchange string, channels int) *broker.Publisher {
	t.Helper()
	pub, err := broker.NewPublisher(broker.PublisherOptions{
		Config:         broker.TopicPublisherConfig(amqpURL, exchange, channels),
		RedialInterval: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// newRelay builds a relay with fast retries for tests and a private
// registry, returned for metric assertions.
func newRelay(t testing.TB, opts RelayOptions) (*Relay, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts.Metrics = reg
	opts.Backoff = cmp.Or(opts.Backoff, 10*time.Millisecond)
	opts.MaxBackoff = cmp.Or(opts.MaxBackoff, 100*time.Millisecond)
	opts.PollInterval = cmp.Or(opts.PollInterval, 20*time.Millisecond)
	opts.LockRetryInterval = cmp.Or(opts.LockRetryInterval, 50*time.Millisecond)
	r, err := NewRelay(opts)
	require.NoError(t, err)
	return r, reg
}

// newPackingRelay is a relay with lanes that packs the messages of the
// "dispatch." topics, as the trigger's does.
func newPackingRelay(t testing.TB, pool *pgxpool.Pool, top topology, lanes int) (*Relay, *prometheus.Registry) {
	t.Helper()
	return newRelay(t, RelayOptions{
		Pool: pool, Publisher: newPublisher(t, amqptest.URL(), top.exchange), Lanes: lanes,
		Pack: func(topic string) bool { return strings.HasPrefix(topic, "dispatch.") },
	})
}

// metric reads a collector registered by the relay.
func metric(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// fakePublisher wraps a publisher and injects failures.
type fakePublisher struct {
	next message.Publisher
	// fail decides, per call number (from 0), whether the call fails and
	// whether it fails after really publishing (a lost confirm).
	fail func(call int64) (fail, afterPublish bool)

	calls    atomic.Int64
	failures atomic.Int64
}

var errInjected = errors.New("injected publish failure")

func (f *fakePublisher) Publish(topic string, msgs ...*message.Message) error {
	n := f.calls.Add(1) - 1
	fail, after := false, false
	if f.fail != nil {
		fail, after = f.fail(n)
	}
	if fail && !after {
		f.failures.Add(1)
		return errInjected
	}
	if err := f.next.Publish(topic, msgs...); err != nil {
		return err
	}
	if fail {
		f.failures.Add(1)
		return errInjected
	}
	return nil
}

func (f *fakePublisher) Close() error { return nil }

// pendingMessages is how many messages wait in the outbox of pool's
// search_path: a grouped row of WriteGrouped counts its messages, any
// other row one.
func pendingMessages(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT coalesce(sum(coalesce((headers->>'`+GroupHeader+`')::bigint, 1)), 0)::bigint FROM outbox`).Scan(&n))
	return n
}
