package outbox

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	brokerv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/broker/v1"
)

// Row is an outbox row as stored, for tools and tests that read the table
// and want the messages it holds (see [Row.Messages]).
type Row struct {
	AggregateID string
	RoutingKey  string
	MessageID   string
	Payload     []byte
	// Headers is the headers column: a message's headers (with
	// [DueAtHeader]) for a row of one message, [GroupHeader] alone for a
	// row of several.
	Headers   map[string]string
	Partition int
}

// Messages returns the messages r holds, as they were written: one for a
// row written by [Write] (or a message alone in its row of
// [WriteGrouped]), each message of the row in order for a grouped row.
// Every message has its MessageID, Payload, Headers and DueAt (taken out
// of the headers); AggregateID, RoutingKey and Partition are the row's
// (for a row of WriteGrouped the aggregate is [PartitionAggregate]'s, not
// the one the message was written with). Headers is nil when empty.
func (r Row) Messages() ([]Message, error) {
	stored, err := storedMessages(r.MessageID, r.Payload, maps.Clone(r.Headers)) // r's map stays as read
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	out := make([]Message, len(stored))
	for i, m := range stored {
		headers := m.headers
		if len(headers) == 0 {
			headers = nil
		}
		out[i] = Message{
			AggregateID: r.AggregateID, RoutingKey: r.RoutingKey, MessageID: m.id, Payload: m.payload,
			Headers: headers, DueAt: m.dueAt, Partition: r.Partition,
		}
	}
	return out, nil
}

// storedMessage is one message of a row as the relay publishes it.
type storedMessage struct {
	id      string
	payload []byte
	headers map[string]string // without DueAtHeader
	dueAt   time.Time
}

// storedMessages returns the messages of a row given its message_id,
// payload and headers columns; headers (and a grouped row's decoded
// metadata) lose their DueAtHeader, which becomes dueAt. A row of several
// whose payload is not a non-empty MessageBatch is an error: the relay
// cannot publish it.
func storedMessages(messageID string, payload []byte, headers map[string]string) ([]storedMessage, error) {
	if _, ok := headers[GroupHeader]; !ok {
		return []storedMessage{{id: messageID, payload: payload, headers: headers, dueAt: takeDueAt(headers)}}, nil
	}
	batch := &brokerv1.MessageBatch{}
	if err := proto.Unmarshal(payload, batch); err != nil {
		return nil, fmt.Errorf("decode the messages of a grouped row: %w", err)
	}
	if len(batch.Messages) == 0 {
		return nil, errors.New("a grouped row without messages")
	}
	out := make([]storedMessage, len(batch.Messages))
	for i, m := range batch.Messages {
		out[i] = storedMessage{id: m.Id, payload: m.Payload, headers: m.Metadata, dueAt: takeDueAt(m.Metadata)}
	}
	return out, nil
}

// rowIDHeader is the value of [RowIDHeader] for message index of row id
// (index < 0: the row's only message).
func rowIDHeader(id int64, index int) string {
	s := strconv.FormatInt(id, 10)
	if index < 0 {
		return s
	}
	return s + "/" + strconv.Itoa(index)
}
