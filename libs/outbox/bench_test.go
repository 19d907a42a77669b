package outbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
)

// benchMessages returns n messages shaped like registry events: 200 aggregates,
// a ~200-byte JSON payload and a traceparent header.
func benchMessages(prefix string, n int) []Message {
	payload := []byte(`{"job_id":"0190d6c8-6f1e-7c2a-9d51-3b8f2a4e6c10","tenant_id":"acme","schedule":"*/5 * * * *","` +
		`target":"https://example.invalid/hook","revision":42,"updated_at":"2025-01-01T00:00:00Z"}`)
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i] = Message{
			AggregateID: fmt.Sprintf("job-%d", i%200),
			RoutingKey:  "job.updated",
			MessageID:   fmt.Sprintf("%s-%d", prefix, i),
			Payload:     payload,
			Headers:     map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		}
	}
	return msgs
}

// BenchmarkOutboxWrite measures one transaction writing 1,000 rows with
// Write (commit included).
func BenchmarkOutboxWrite(b *testing.B) {
	pool := testPool(b)
	ctx := context.Background()
	msgs := benchMessages("w", 1000)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		tx, err := pool.Begin(ctx)
		require.NoError(b, err)
		require.NoError(b, Write(ctx, tx, msgs...))
		require.NoError(b, tx.Commit(ctx))
	}
	b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkWriteStrategies compares the COPY that Write uses with a single
// INSERT ... SELECT FROM unnest of column arrays, 1,000 rows per
// transaction.
func BenchmarkWriteStrategies(b *testing.B) {
	strategies := []struct {
		name  string
		write func(context.Context, pgx.Tx, []Message) error
	}{
		{"copy", func(ctx context.Context, tx pgx.Tx, msgs []Message) error { return Write(ctx, tx, msgs...) }},
		{"unnest", writeUnnest},
	}
	for _, s := range strategies {
		b.Run(s.name, func(b *testing.B) {
			pool := testPool(b)
			ctx := context.Background()
			msgs := benchMessages("s", 1000)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				tx, err := pool.Begin(ctx)
				require.NoError(b, err)
				require.NoError(b, s.write(ctx, tx, msgs))
				require.NoError(b, tx.Commit(ctx))
			}
			b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// writeUnnest is the INSERT ... unnest alternative to Write, kept to
// justify the choice of COPY. WITH ORDINALITY ... ORDER BY pins the order in
// which ids are drawn to the order of msgs.
func writeUnnest(ctx context.Context, tx pgx.Tx, msgs []Message) error {
	var cols struct {
		aggregates, routingKeys, messageIDs, headers []string
		payloads                                     [][]byte
	}
	for i, m := range msgs {
		if err := validate(m); err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
		h, err := headersJSON(m.Headers, m.DueAt)
		if err != nil {
			return err
		}
		cols.aggregates = append(cols.aggregates, m.AggregateID)
		cols.routingKeys = append(cols.routingKeys, m.RoutingKey)
		cols.messageIDs = append(cols.messageIDs, m.MessageID)
		cols.payloads = append(cols.payloads, payload(m.Payload))
		cols.headers = append(cols.headers, h)
	}
	_, err := tx.Exec(ctx, `INSERT INTO outbox (aggregate_id, routing_key, message_id, payload, headers)
SELECT a, r, m, p, h::jsonb
FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[]) WITH ORDINALITY AS u(a, r, m, p, h, n)
ORDER BY n`, cols.aggregates, cols.routingKeys, cols.messageIDs, cols.payloads, cols.headers)
	return err
}

// BenchmarkRelay measures how fast a relay drains a backlog to a real queue:
// each op writes rowsPerOp rows (untimed), then times the relay publishing
// them with confirms and deleting them.
func BenchmarkRelay(b *testing.B) {
	const rowsPerOp = 5000
	cases := []struct {
		name      string
		lanes     int
		queueArgs amqp091.Table
	}{
		{"classic/lanes=16", 16, nil},
		{"classic/lanes=64", 64, nil},
		{"quorum/lanes=16", 16, amqp091.Table{"x-queue-type": "quorum"}},
		{"quorum/lanes=64", 64, amqp091.Table{"x-queue-type": "quorum"}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			pool := testPool(b)
			exchange := amqptest.UniqueName(b, "outbox-bench")
			queue := amqptest.DeclareTopicQueueArgs(b, exchange, "#", tc.queueArgs)
			pub := newPublisherPool(b, amqptest.URL(), exchange, tc.lanes)
			r, _ := newRelay(b, RelayOptions{Pool: pool, Publisher: pub, Lanes: tc.lanes})
			ch := amqptest.Channel(b)
			ctx := context.Background()
			runRelay(b, r)

			var elapsed time.Duration
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				// Write while the relay cannot see the rows yet: one
				// transaction, committed right before the clock starts.
				tx, err := pool.Begin(ctx)
				require.NoError(b, err)
				msgs := benchMessages(fmt.Sprintf("r%d", i), rowsPerOp)
				for j := 0; j < len(msgs); j += 1000 {
					require.NoError(b, Write(ctx, tx, msgs[j:j+1000]...))
				}
				require.NoError(b, tx.Commit(ctx))
				b.StartTimer()

				start := time.Now()
				r.Notify()
				for {
					var pending bool
					require.NoError(b, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox)`).Scan(&pending))
					if !pending {
						break
					}
					time.Sleep(time.Millisecond)
				}
				elapsed += time.Since(start)

				b.StopTimer()
				n, err := ch.QueuePurge(queue, false)
				require.NoError(b, err)
				require.GreaterOrEqual(b, n, rowsPerOp)
				b.StartTimer()
			}
			b.ReportMetric(float64(b.N*rowsPerOp)/elapsed.Seconds(), "rows/s")
		})
	}
}
