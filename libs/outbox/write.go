package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	brokerv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/broker/v1"
)

// Schema returns the DDL of the outbox table, for inclusion in a service's
// migrations. Names are unqualified: the connection's search_path selects
// the schema. It is idempotent (IF NOT EXISTS), so two services sharing a
// schema may both include it.
//
// Storage parameters make autovacuum visit the table after a fixed number of
// dead rows instead of a fraction of the table: every row is inserted once
// and deleted once, so an outbox that is nearly empty still accumulates dead
// tuples at the write rate, and the relay's index scan from the lowest id
// would otherwise wade through them.
func Schema() string {
	return `CREATE TABLE IF NOT EXISTS outbox (
    id           bigserial   PRIMARY KEY,
    aggregate_id text        NOT NULL,
    routing_key  text        NOT NULL,
    message_id   text        NOT NULL,
    payload      bytea       NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now()
) WITH (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 10000
);
`
}

// PartitionSchema returns the DDL that adds the partition column, and the
// index a relay with [RelayOptions.Ownership] reads through, to the table
// of [Schema], for inclusion in the migrations of a service whose relays
// own partitions (idempotent). Rows that were there before take
// partition 0.
func PartitionSchema() string {
	return `ALTER TABLE outbox ADD COLUMN IF NOT EXISTS partition integer NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS outbox_partition ON outbox (partition, id);
`
}

// GroupSchema returns the DDL that suits the table of [Schema] to the
// rows of [WriteGrouped], for inclusion in the migrations of a service
// that writes them (idempotent): the table's toast_tuple_target becomes
// its maximum, 8160 bytes, so PostgreSQL leaves a row alone up to about a
// page instead of compressing every row beyond 2 kB and moving what still
// exceeds 2 kB to the TOAST table, in chunks that are each a row inserted
// and deleted beside the outbox row (and an index entry). A grouped row
// beyond 8160 bytes is compressed, and moved out of line only if that is
// not enough. Measured with rows of about 60 dispatch requests (16 kB, 5
// kB compressed): about 50 TOAST rows per 1,000 messages at the default,
// none with this. Rows of one message, under 2 kB in practice, are not
// affected.
func GroupSchema() string {
	return `ALTER TABLE outbox SET (toast_tuple_target = 8160);
`
}

// Message is one outbox message to write: a row of its own with [Write],
// or one of a row's messages with [WriteGrouped].
type Message struct {
	// AggregateID is the ordering key: messages of one aggregate (for example
	// one job) are published in insert order. Required.
	AggregateID string
	// RoutingKey is the AMQP routing key on the relay's topic exchange, for
	// example "job.created". Required.
	RoutingKey string
	// MessageID becomes the AMQP message-id and the Watermill UUID; consumers
	// deduplicate by it, so it must be unique per event (a UUID). Required.
	MessageID string
	// Payload is the message body. Nil is stored as empty.
	Payload []byte
	// Headers become AMQP headers (Watermill metadata), for example the W3C
	// traceparent written by broker.InjectTrace. May be nil. The names
	// [DueAtHeader] (set DueAt instead) and [GroupHeader] are reserved.
	Headers map[string]string
	// DueAt is when the message's content was due (for the trigger: the
	// slot's firing time), the start of what the relay's
	// outbox_due_to_confirm_seconds measures: how late the broker
	// confirmed a promise made for a moment. Zero (the default) means the
	// message has no due time and is not measured. It is stored in the
	// message's headers under [DueAtHeader], so the table needs no column
	// of its own, and the relay removes it before publishing. It must lie
	// within the range of Unix nanoseconds (the years 1678 to 2262).
	DueAt time.Time
	// Partition is the partition whose owner publishes the message, for a
	// relay with [RelayOptions.Ownership] (the table needs
	// [PartitionSchema]). Messages of one aggregate must share it. Leave
	// it 0 for an outbox without partitions.
	Partition int
}

// Write inserts msgs into the outbox in the caller's transaction tx, in one
// COPY, and assigns them increasing ids in argument order: one row per
// message. Zero messages return nil without touching tx. A message with an
// empty AggregateID, RoutingKey or MessageID, a Partition or DueAt out of
// range, or a header named [DueAtHeader] or [GroupHeader], is rejected
// (wrapping [ErrInvalidMessage]) before anything is written.
//
// COPY rather than INSERT ... SELECT FROM unnest($1::text[], ...): for 1,000
// rows it measured about 4.3 ms against 5.2 ms per transaction and allocates
// a quarter of the memory on the client (BenchmarkWriteStrategies). pgx caches the table description
// per connection, so after a connection's first Write a COPY is a single
// round trip too.
//
// The rows become visible to the relay when tx commits; call Relay.Notify
// after the commit to have them published without waiting for the next poll.
func Write(ctx context.Context, tx pgx.Tx, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	// Validate everything first: a COPY that fails halfway would abort the
	// caller's transaction, while a validation error leaves it usable.
	if err := validateAll(msgs); err != nil {
		return err
	}
	partitioned := slices.ContainsFunc(msgs, func(m Message) bool { return m.Partition != 0 })
	return insert(ctx, tx, len(msgs), partitioned, func(i int) (storedRow, error) {
		m := msgs[i]
		headers, err := headersJSON(m.Headers, m.DueAt)
		if err != nil {
			return storedRow{}, fmt.Errorf("message %d headers: %w", i, err)
		}
		return storedRow{m.AggregateID, m.RoutingKey, m.MessageID, payload(m.Payload), headers, m.Partition}, nil
	})
}

// Limits of the rows [WriteGrouped] writes.
const (
	// MaxGroupMessages is the most messages one row holds: the relay's
	// chunk (and broker batch) size, so that a full row is one broker
	// message when it does not straddle two chunks.
	MaxGroupMessages = 64
	// MaxGroupBytes bounds the payloads and headers of one row's
	// messages: a row is closed before a message that would take it
	// beyond, and a message larger than this has a row of its own.
	MaxGroupBytes = 1 << 20
)

// GroupHeader marks a row written by [WriteGrouped] that holds several
// messages; its value is their number, in decimal. It lives in the row's
// headers column and never reaches the broker. [Write] rejects it.
const GroupHeader = "cronmesh-outbox-group"

// PartitionAggregate is the aggregate id of every row [WriteGrouped]
// writes for partition p: the relay's lane key, so that all of a
// partition's grouped rows are published by one lane, in id order. A
// message written by [Write] with this AggregateID is ordered with them.
func PartitionAggregate(p int) string { return "partition:" + strconv.Itoa(p) }

// WriteGrouped inserts msgs into the outbox in tx, like [Write], but
// stores many messages in one row: the messages of one partition and
// routing key, in argument order, share a row, up to [MaxGroupMessages]
// and [MaxGroupBytes] per row, so a transaction writes about one row per
// (partition, routing key) instead of one per message. The rows are
// inserted in one COPY. A message alone in its row is stored as [Write]
// stores it; a row of several has [GroupHeader] and, as its payload, a
// cronmesh.broker.v1.MessageBatch of the messages, each with its id,
// headers (the due time under [DueAtHeader]) and payload. Validation is
// Write's.
//
// The relay publishes each message of a row as if it had been written
// alone: its own message id, headers, trace span, due-time observation
// and possible-duplicate flag; it deletes the row once every message of
// it is confirmed, and publishes a row again whole, flagging every message
// a possible duplicate, when it could not (a failure after part of a row
// was confirmed, or a crash between the confirms and the DELETE).
//
// Order: every row written here has the aggregate id
// PartitionAggregate(Partition), so a partition's rows are published in id
// order by one lane, each row's messages in argument order. A message is
// put into an earlier row of its partition and routing key only when no
// later row holds a message of its AggregateID, so messages of one
// aggregate keep their argument order, as with Write, and the same rule
// (serialize the transactions writing one aggregate) keeps their order
// across transactions. Messages of one aggregate written by Write and by
// WriteGrouped have no relative order (they are in different lanes):
// write an aggregate's messages with one of the two, or give Write's
// messages the aggregate id PartitionAggregate.
func WriteGrouped(ctx context.Context, tx pgx.Tx, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := validateAll(msgs); err != nil {
		return err
	}
	groups := group(msgs)
	partitioned := slices.ContainsFunc(msgs, func(m Message) bool { return m.Partition != 0 })
	return insert(ctx, tx, len(groups), partitioned, func(i int) (storedRow, error) {
		g := groups[i]
		first := msgs[g.members[0]]
		if len(g.members) == 1 {
			headers, err := headersJSON(first.Headers, first.DueAt)
			if err != nil {
				return storedRow{}, fmt.Errorf("message %d headers: %w", g.members[0], err)
			}
			return storedRow{PartitionAggregate(first.Partition), first.RoutingKey, first.MessageID, payload(first.Payload), headers, first.Partition}, nil
		}
		batch := &brokerv1.MessageBatch{Messages: make([]*brokerv1.BatchedMessage, len(g.members))}
		for j, k := range g.members {
			m := msgs[k]
			md := m.Headers
			if !m.DueAt.IsZero() {
				md = maps.Clone(md)
				if md == nil {
					md = make(map[string]string, 1)
				}
				md[DueAtHeader] = strconv.FormatInt(m.DueAt.UnixNano(), 10)
			}
			batch.Messages[j] = &brokerv1.BatchedMessage{Id: m.MessageID, Metadata: md, Payload: m.Payload}
		}
		body, err := proto.Marshal(batch)
		if err != nil {
			return storedRow{}, fmt.Errorf("encode the %d messages of a row: %w", len(g.members), err)
		}
		headers := `{"` + GroupHeader + `":"` + strconv.Itoa(len(g.members)) + `"}`
		return storedRow{PartitionAggregate(first.Partition), first.RoutingKey, first.MessageID, body, headers, first.Partition}, nil
	})
}

// rowGroup is one row of WriteGrouped: the indexes of its messages.
type rowGroup struct {
	members []int
	bytes   int
}

// group assigns msgs to rows: a message joins the open row of its
// partition and routing key unless that row is full or a later row holds
// a message of its aggregate (it would then be published before that
// one); otherwise it opens a new row, which becomes the open one. Rows are
// returned in the order they were opened, the order of their ids.
func group(msgs []Message) []rowGroup {
	type key struct {
		partition  int
		routingKey string
	}
	var rows []rowGroup
	open := map[key]int{}       // the open row of each key
	lastRow := map[string]int{} // the last row of each aggregate
	for i, m := range msgs {
		k := key{m.Partition, m.RoutingKey}
		size := len(m.Payload) + len(m.MessageID)
		for h, v := range m.Headers {
			size += len(h) + len(v)
		}
		j, ok := open[k]
		if ok {
			r := &rows[j]
			last, seen := lastRow[m.AggregateID]
			ok = len(r.members) < MaxGroupMessages && r.bytes+size <= MaxGroupBytes && (!seen || last <= j)
		}
		if !ok {
			rows = append(rows, rowGroup{})
			j = len(rows) - 1
			open[k] = j
		}
		rows[j].members = append(rows[j].members, i)
		rows[j].bytes += size
		lastRow[m.AggregateID] = j
	}
	return rows
}

// storedRow is the columns of one row to insert.
type storedRow struct {
	aggregateID, routingKey, messageID string
	payload                            []byte
	headers                            string // JSON text
	partition                          int
}

// insert COPYs n rows made by row into the outbox. id and created_at take
// their defaults, and so does partition (0) unless partitioned: a table
// without the column (an outbox without partitions) takes messages that
// leave it 0.
func insert(ctx context.Context, tx pgx.Tx, n int, partitioned bool, row func(i int) (storedRow, error)) error {
	columns := []string{"aggregate_id", "routing_key", "message_id", "payload", "headers"}
	if partitioned {
		columns = append(columns, "partition")
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"outbox"}, columns,
		pgx.CopyFromSlice(n, func(i int) ([]any, error) {
			r, err := row(i)
			if err != nil {
				return nil, err
			}
			values := []any{r.aggregateID, r.routingKey, r.messageID, r.payload, r.headers}
			if partitioned {
				values = append(values, int32(r.partition))
			}
			return values, nil
		}))
	if err != nil {
		return fmt.Errorf("outbox: insert %d rows: %w", n, err)
	}
	return nil
}

func validateAll(msgs []Message) error {
	for i, m := range msgs {
		if err := validate(m); err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
	}
	return nil
}

func validate(m Message) error {
	if m.AggregateID == "" || m.RoutingKey == "" || m.MessageID == "" {
		return fmt.Errorf("id %q: AggregateID, RoutingKey and MessageID are required: %w", m.MessageID, ErrInvalidMessage)
	}
	if m.Partition < 0 || m.Partition > math.MaxInt32 {
		return fmt.Errorf("id %q: partition %d is not a non-negative int32: %w", m.MessageID, m.Partition, ErrInvalidMessage)
	}
	if _, ok := m.Headers[DueAtHeader]; ok {
		return fmt.Errorf("id %q: header %s is reserved (set DueAt): %w", m.MessageID, DueAtHeader, ErrInvalidMessage)
	}
	if _, ok := m.Headers[GroupHeader]; ok {
		return fmt.Errorf("id %q: header %s is reserved: %w", m.MessageID, GroupHeader, ErrInvalidMessage)
	}
	// UnixNano wraps beyond its range, so a time beyond it does not come back.
	if !m.DueAt.IsZero() && !time.Unix(0, m.DueAt.UnixNano()).Equal(m.DueAt) {
		return fmt.Errorf("id %q: DueAt %s is beyond Unix nanoseconds: %w", m.MessageID, m.DueAt, ErrInvalidMessage)
	}
	return nil
}

// DueAtHeader is the header under which [Write] stores [Message.DueAt], as
// Unix nanoseconds in decimal. The relay reads it and removes it before
// publishing: a consumer never sees it.
const DueAtHeader = "cronmesh-due-at"

// payload maps nil to empty: NULL would violate NOT NULL.
func payload(p []byte) []byte {
	if p == nil {
		return []byte{}
	}
	return p
}

// headersJSON encodes headers as the JSON text of a jsonb column, with
// dueAt under [DueAtHeader] unless it is zero; pgx sends a string to jsonb
// as raw JSON. The due time is appended to the encoded text, which the
// name and a decimal allow without escaping, rather than put into a copy
// of the map, which would allocate a map per row on Write's COPY path.
func headersJSON(h map[string]string, dueAt time.Time) (string, error) {
	var b []byte
	switch {
	case len(h) == 0 && dueAt.IsZero():
		return "{}", nil
	case len(h) == 0:
		b = make([]byte, 0, len(DueAtHeader)+28)
		b = append(b, '{')
	default:
		var err error
		if b, err = json.Marshal(h); err != nil || dueAt.IsZero() {
			return string(b), err
		}
		b[len(b)-1] = ',' // the closing brace: the due time follows
	}
	b = append(b, `"`+DueAtHeader+`":"`...)
	b = strconv.AppendInt(b, dueAt.UnixNano(), 10)
	b = append(b, `"}`...)
	return string(b), nil
}

// ErrInvalidMessage is wrapped by the error [Write] and [WriteGrouped]
// return for a message without an AggregateID, RoutingKey or MessageID,
// with a Partition that is negative or beyond int32, with a header named
// [DueAtHeader] or [GroupHeader], or with a DueAt beyond Unix nanoseconds.
var ErrInvalidMessage = errors.New("outbox: invalid message")
