package outbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestWrite(t *testing.T) {
	t.Parallel()

	type stored struct {
		AggregateID, RoutingKey, MessageID string
		Payload                            []byte
		Headers                            map[string]string
	}
	tests := []struct {
		name    string
		msgs    []Message
		wantErr error
		want    []stored
	}{
		{name: "zero messages", msgs: nil, want: nil},
		{
			name: "rows in argument order with defaults for nil fields",
			msgs: []Message{
				{AggregateID: "job-1", RoutingKey: "job.created", MessageID: "m1", Payload: []byte("p1"),
					Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}},
				{AggregateID: "job-2", RoutingKey: "job.deleted", MessageID: "m2"},
				{AggregateID: "job-1", RoutingKey: "job.updated", MessageID: "m3", Payload: []byte{0, 1, 2}},
			},
			want: []stored{
				{"job-1", "job.created", "m1", []byte("p1"),
					map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}},
				{"job-2", "job.deleted", "m2", []byte{}, map[string]string{}},
				{"job-1", "job.updated", "m3", []byte{0, 1, 2}, map[string]string{}},
			},
		},
		{
			name: "incomplete message rejects the whole call",
			msgs: []Message{
				{AggregateID: "job-1", RoutingKey: "job.created", MessageID: "m1"},
				{AggregateID: "job-1", RoutingKey: "job.created"},
			},
			wantErr: ErrInvalidMessage,
		},
		{name: "missing aggregate", msgs: []Message{{RoutingKey: "k", MessageID: "m"}}, wantErr: ErrInvalidMessage},
		{name: "missing routing key", msgs: []Message{{AggregateID: "a", MessageID: "m"}}, wantErr: ErrInvalidMessage},
		{name: "negative partition", msgs: []Message{{AggregateID: "a", RoutingKey: "k", MessageID: "m", Partition: -1}}, wantErr: ErrInvalidMessage},
		{
			name: "due times go into the headers as Unix nanoseconds",
			msgs: []Message{
				{AggregateID: "job-1", RoutingKey: "dispatch.normal", MessageID: "m1", DueAt: time.Unix(1_900_000_000, 123_456_789)},
				{AggregateID: "job-1", RoutingKey: "dispatch.normal", MessageID: "m2", DueAt: time.Unix(1_900_000_001, 0),
					Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x-q": `"\`}},
			},
			want: []stored{
				{"job-1", "dispatch.normal", "m1", []byte{}, map[string]string{DueAtHeader: "1900000000123456789"}},
				{"job-1", "dispatch.normal", "m2", []byte{}, map[string]string{
					"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x-q": `"\`, DueAtHeader: "1900000001000000000",
				}},
			},
		},
		{
			name:    "the due time's header is reserved",
			msgs:    []Message{{AggregateID: "a", RoutingKey: "k", MessageID: "m", Headers: map[string]string{DueAtHeader: "1"}}},
			wantErr: ErrInvalidMessage,
		},
		{
			name:    "due time beyond Unix nanoseconds",
			msgs:    []Message{{AggregateID: "a", RoutingKey: "k", MessageID: "m", DueAt: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)}},
			wantErr: ErrInvalidMessage,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := testPool(t)
			ctx := context.Background()

			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }() // a no-op after the commit
			err = Write(ctx, tx, tt.msgs...)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))

			rows, err := pool.Query(ctx, `SELECT aggregate_id, routing_key, message_id, payload, headers FROM outbox ORDER BY id`)
			require.NoError(t, err)
			var got []stored
			for rows.Next() {
				var s stored
				require.NoError(t, rows.Scan(&s.AggregateID, &s.RoutingKey, &s.MessageID, &s.Payload, &s.Headers))
				got = append(got, s)
			}
			require.NoError(t, rows.Err())
			require.Equal(t, tt.want, got)
		})
	}
}

func TestWriteRolledBackLeavesNothing(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	ctx := context.Background()

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, Write(ctx, tx, seqMessages("rb", 3, 3)...))
	require.NoError(t, tx.Rollback(ctx))
	require.Zero(t, countRows(t, pool))
}

func TestSchemaIsIdempotent(t *testing.T) {
	t.Parallel()
	pool := testPool(t) // has applied Schema once
	_, err := pool.Exec(context.Background(), Schema())
	require.NoError(t, err)
}

// storedRows reads the outbox's rows in id order.
func storedRows(t testing.TB, pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) []Row {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT aggregate_id, routing_key, message_id, payload, headers, partition FROM outbox ORDER BY id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) {
		var rw Row
		err := r.Scan(&rw.AggregateID, &rw.RoutingKey, &rw.MessageID, &rw.Payload, &rw.Headers, &rw.Partition)
		return rw, err
	})
	require.NoError(t, err)
	return out
}

// rowMessages expands rows into the message ids each holds.
func rowMessages(t testing.TB, rows []Row) [][]string {
	t.Helper()
	out := make([][]string, len(rows))
	for i, rw := range rows {
		msgs, err := rw.Messages()
		require.NoError(t, err)
		for _, m := range msgs {
			out[i] = append(out[i], m.MessageID)
		}
	}
	return out
}

func TestWriteGroupedStoresAMessageBatchPerPartitionAndRoutingKey(t *testing.T) {
	t.Parallel()
	pool := partitionedPool(t)
	due := time.Unix(1_900_000_000, 123_456_789)
	trace := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	msgs := []Message{
		{AggregateID: "job-a", RoutingKey: "dispatch.normal", MessageID: "a1", Payload: []byte("a#1"), Headers: trace, DueAt: due, Partition: 3},
		{AggregateID: "job-b", RoutingKey: "dispatch.high", MessageID: "b1", Payload: []byte("b#1"), Partition: 3},
		{AggregateID: "job-c", RoutingKey: "dispatch.normal", MessageID: "c1", Partition: 5, DueAt: due},
		{AggregateID: "job-a", RoutingKey: "dispatch.normal", MessageID: "a2", Payload: []byte("a#2"), Headers: trace, Partition: 3},
		{AggregateID: "job-d", RoutingKey: "dispatch.normal", MessageID: "d1", Payload: []byte{}, Partition: 3},
	}
	write := func(msgs ...Message) {
		tx, err := pool.Begin(t.Context())
		require.NoError(t, err)
		require.NoError(t, WriteGrouped(t.Context(), tx, msgs...))
		require.NoError(t, tx.Commit(t.Context()))
	}
	write(msgs...)
	require.Equal(t, map[string]string{"traceparent": trace["traceparent"]}, trace, "the caller's headers are left alone")

	rows := storedRows(t, pool)
	require.Len(t, rows, 3, "one row per (partition, routing key)")
	require.Equal(t, [][]string{{"a1", "a2", "d1"}, {"b1"}, {"c1"}}, rowMessages(t, rows), "rows in the order they were opened")
	grouped, alone, other := rows[0], rows[1], rows[2]
	require.Equal(t, PartitionAggregate(3), grouped.AggregateID)
	require.Equal(t, "dispatch.normal", grouped.RoutingKey)
	require.Equal(t, 3, grouped.Partition)
	require.Equal(t, "a1", grouped.MessageID, "a grouped row is named after its first message")
	require.Equal(t, map[string]string{GroupHeader: "3"}, grouped.Headers, "the row's headers hold the marker only")
	// A message alone in its row is stored as Write stores it, under its
	// partition's aggregate.
	require.Equal(t, Row{AggregateID: PartitionAggregate(3), RoutingKey: "dispatch.high", MessageID: "b1", Payload: []byte("b#1"),
		Headers: map[string]string{}, Partition: 3}, alone)
	require.Equal(t, PartitionAggregate(5), other.AggregateID)

	got, err := grouped.Messages()
	require.NoError(t, err)
	want := []Message{
		{AggregateID: PartitionAggregate(3), RoutingKey: "dispatch.normal", MessageID: "a1", Payload: []byte("a#1"), Headers: trace, DueAt: due, Partition: 3},
		{AggregateID: PartitionAggregate(3), RoutingKey: "dispatch.normal", MessageID: "a2", Payload: []byte("a#2"), Headers: trace, Partition: 3},
		{AggregateID: PartitionAggregate(3), RoutingKey: "dispatch.normal", MessageID: "d1", Partition: 3},
	}
	require.Len(t, got, len(want))
	for i := range want {
		require.Equal(t, want[i].MessageID, got[i].MessageID)
		require.Equal(t, string(want[i].Payload), string(got[i].Payload))
		require.Equal(t, want[i].Headers, got[i].Headers, "message %s: its own headers, without the due time", want[i].MessageID)
		require.True(t, want[i].DueAt.Equal(got[i].DueAt), "message %s: due %s, got %s", want[i].MessageID, want[i].DueAt, got[i].DueAt)
		require.Equal(t, want[i].AggregateID, got[i].AggregateID)
		require.Equal(t, want[i].Partition, got[i].Partition)
	}
	got, err = other.Messages()
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.True(t, due.Equal(got[0].DueAt), "a row of one message keeps its due time in its headers")
	require.Nil(t, got[0].Headers)

	require.EqualValues(t, len(msgs), pendingMessages(t, pool), "messages, not rows")

	// Zero messages write nothing; a reserved header rejects the call.
	write()
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(t.Context()) }()
	err = WriteGrouped(t.Context(), tx, Message{AggregateID: "a", RoutingKey: "k", MessageID: "m", Headers: map[string]string{GroupHeader: "2"}})
	require.ErrorIs(t, err, ErrInvalidMessage)
	err = Write(t.Context(), tx, Message{AggregateID: "a", RoutingKey: "k", MessageID: "m", Headers: map[string]string{GroupHeader: "2"}})
	require.ErrorIs(t, err, ErrInvalidMessage)
	err = WriteGrouped(t.Context(), tx, Message{AggregateID: "a", RoutingKey: "k"})
	require.ErrorIs(t, err, ErrInvalidMessage)
	require.NoError(t, tx.Commit(t.Context()), "a rejected call leaves the transaction usable")
	require.Len(t, storedRows(t, pool), 3)
}

func TestWriteGroupedBoundsRowsAndKeepsOrderPerAggregate(t *testing.T) {
	t.Parallel()
	msg := func(agg, key, id string, size int) Message {
		return Message{AggregateID: agg, RoutingKey: key, MessageID: id, Payload: make([]byte, size)}
	}
	tests := []struct {
		name string
		msgs []Message
		want [][]string
	}{
		{
			name: "full rows",
			msgs: func() []Message {
				var msgs []Message
				for i := range 2*MaxGroupMessages + 2 {
					msgs = append(msgs, msg(fmt.Sprint("job-", i), "k", fmt.Sprint(i), 0))
				}
				return msgs
			}(),
			want: func() [][]string {
				var rows [][]string
				for i := range 2*MaxGroupMessages + 2 {
					if i%MaxGroupMessages == 0 {
						rows = append(rows, nil)
					}
					rows[len(rows)-1] = append(rows[len(rows)-1], fmt.Sprint(i))
				}
				return rows
			}(),
		},
		{
			name: "bytes",
			msgs: []Message{
				msg("a", "k", "small-1", 10),
				msg("b", "k", "half", MaxGroupBytes/2),
				msg("c", "k", "over", MaxGroupBytes/2),
				msg("d", "k", "huge", 2*MaxGroupBytes),
				msg("e", "k", "small-2", 10),
			},
			want: [][]string{{"small-1", "half"}, {"over"}, {"huge"}, {"small-2"}},
		},
		{
			// job-a's second message may not join the first row of "k":
			// it would be published before job-a's message of "other".
			name: "an aggregate that changes routing key",
			msgs: []Message{
				msg("job-a", "k", "a1", 0),
				msg("job-b", "k", "b1", 0),
				msg("job-a", "other", "a2", 0),
				msg("job-b", "k", "b2", 0),
				msg("job-a", "k", "a3", 0),
				msg("job-c", "k", "c1", 0),
			},
			want: [][]string{{"a1", "b1", "b2"}, {"a2"}, {"a3", "c1"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := partitionedPool(t)
			tx, err := pool.Begin(t.Context())
			require.NoError(t, err)
			require.NoError(t, WriteGrouped(t.Context(), tx, tt.msgs...))
			require.NoError(t, tx.Commit(t.Context()))
			require.Equal(t, tt.want, rowMessages(t, storedRows(t, pool)))
		})
	}
}

func TestRowMessagesRejectsAnUndecodableGroupedRow(t *testing.T) {
	t.Parallel()
	for _, payload := range [][]byte{[]byte("not a batch \xff\xff"), nil} {
		_, err := Row{AggregateID: "a", RoutingKey: "k", MessageID: "m", Payload: payload, Headers: map[string]string{GroupHeader: "2"}}.Messages()
		require.Error(t, err)
	}
}
