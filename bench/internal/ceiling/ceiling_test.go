package ceiling_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/bench/internal/ceiling"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
)

func TestBrokerMovesMessagesAndCleansUp(t *testing.T) {
	t.Parallel()
	name := amqptest.UniqueName(t, "ceiling")
	r, err := ceiling.Broker(t.Context(), ceiling.BrokerOptions{URL: amqptest.URL(), Name: name, MessageSize: 280, Duration: time.Second, Publishers: 2, InFlight: 32})
	require.NoError(t, err)
	require.Positive(t, r.Consumed)
	require.Positive(t, r.Published)
	require.Positive(t, r.ConsumedPerSecond())
	_, err = amqptest.Channel(t).QueueDeclarePassive(name, true, false, false, false, nil)
	require.Error(t, err, "the queue is deleted afterwards")
}

func TestDatabaseInsertsBatchesAndDropsItsSchema(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.New(t)
	schema := fmt.Sprintf("ceiling_%d", time.Now().UnixNano())
	r, err := ceiling.Database(t.Context(), ceiling.DatabaseOptions{Pool: pool, Schema: schema, Batch: 100, Writers: 2, Duration: time.Second})
	require.NoError(t, err)
	require.Positive(t, r.Commits)
	// Rows and commits are read a moment apart, so a batch may be in one
	// count and not yet in the other.
	require.InDelta(t, r.Commits*100, r.Rows, 200, "every row of a batch is new")
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n))
	require.Zero(t, n, "the schema is dropped afterwards")
}

func TestMeasureReportsBothCeilingsAndTheShareOfEach(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.New(t)
	name := amqptest.UniqueName(t, "measure")
	m := ceiling.Measure(t.Context(), ceiling.Options{AMQPURL: amqptest.URL(), Pool: pool, Name: name, MessageSize: 280, Duration: time.Second})
	require.NoError(t, m.Err)
	require.Positive(t, m.Broker.Consumed)
	require.Positive(t, m.Database.Rows)
	require.Equal(t, 280, m.MessageSize)

	// A rate of a tenth of the broker's ceiling reads as 10.0 % of it, and
	// as its own share of the database's.
	rate := m.Broker.ConsumedPerSecond() / 10
	table := m.Markdown(rate, "deliveries/s", "what a delivery costs")
	require.Contains(t, table, "this run's deliveries/s as a share")
	require.Contains(t, table, "| 10.0 % |")
	require.Contains(t, table, fmt.Sprintf("| %.1f %% |", 100*rate/m.Database.RowsPerSecond()))
	require.Contains(t, table, "280-byte messages")
	require.Contains(t, table, "what a delivery costs", "the caller's note follows a measured table")

	_, err := amqptest.Channel(t).QueueDeclarePassive(name+".ceiling", true, false, false, false, nil)
	require.Error(t, err, "the queue is deleted afterwards")
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, name+"_ceiling").Scan(&n))
	require.Zero(t, n, "the schema is dropped afterwards")
}

func TestMeasureSkipsOnANegativeDuration(t *testing.T) {
	t.Parallel()
	m := ceiling.Measure(t.Context(), ceiling.Options{Duration: -1})
	require.True(t, m.Skipped)
	require.NoError(t, m.Err)
	skipped := m.Markdown(100, "slots/s", "what a slot costs")
	require.Contains(t, skipped, "Not measured in this run")
	require.NotContains(t, skipped, "what a slot costs", "no note under no table")
}

func TestMeasureReportsAFailure(t *testing.T) {
	t.Parallel()
	m := ceiling.Measure(t.Context(), ceiling.Options{AMQPURL: "amqp://guest:guest@127.0.0.1:1/", Name: "unreachable", Duration: time.Second})
	require.ErrorContains(t, m.Err, "broker ceiling")
	require.Contains(t, m.Markdown(100, "slots/s", "what a slot costs"), "Not measured: broker ceiling")
}
