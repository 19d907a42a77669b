package outbox

import (
	"context"
	"testing"
	"time"

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
