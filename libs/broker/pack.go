package broker

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"google.golang.org/protobuf/proto"

	brokerv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/broker/v1"
)

// BatchHeader marks a broker message whose body is a
// cronmesh.broker.v1.MessageBatch; its value is the number of messages in
// it.
const BatchHeader = "cronmesh-batch"

// DeliveryCountHeader is the quorum queues' count of earlier deliveries of
// a message; the broker's redelivered flag ([RedeliveredHeader]) covers the
// same returns, and this is the second opinion.
const DeliveryCountHeader = "x-delivery-count"

// Pack puts msgs, bound for one destination, into one message whose body
// is a MessageBatch holding each one's id, metadata and payload, so that
// the broker stores, confirms, delivers and acknowledges them once. The
// packed message has a new id and BatchHeader; its context is that of
// msgs[0]. A consumer takes them apart with Unpack.
func Pack(msgs []*message.Message) (*message.Message, error) {
	if len(msgs) == 0 {
		return nil, errors.New("broker: pack: no messages")
	}
	batch := &brokerv1.MessageBatch{Messages: make([]*brokerv1.BatchedMessage, len(msgs))}
	for i, msg := range msgs {
		batch.Messages[i] = &brokerv1.BatchedMessage{Id: msg.UUID, Metadata: msg.Metadata, Payload: msg.Payload}
	}
	body, err := proto.Marshal(batch)
	if err != nil {
		return nil, fmt.Errorf("broker: pack %d messages: %w", len(msgs), err)
	}
	packed := message.NewMessage(uuid.Must(uuid.NewV7()).String(), body)
	packed.Metadata.Set(BatchHeader, strconv.Itoa(len(msgs)))
	packed.SetContext(msgs[0].Context())
	return packed, nil
}

// IsBatch reports whether msg was made by Pack.
func IsBatch(msg *message.Message) bool { return msg.Metadata.Get(BatchHeader) != "" }

// Unpack returns the messages Pack put into msg, each as it was published
// alone, with msg's context. What the broker says of msg's delivery
// (RedeliveredHeader and the quorum queue's delivery count) is said of
// each of them too: a redelivered batch redelivers every message in it.
// The returned messages are not connected to the broker: acknowledge msg
// once each of them is settled.
func Unpack(msg *message.Message) ([]*message.Message, error) {
	batch := &brokerv1.MessageBatch{}
	if err := proto.Unmarshal(msg.Payload, batch); err != nil {
		return nil, fmt.Errorf("broker: unpack %s: %w", msg.UUID, err)
	}
	if len(batch.Messages) == 0 {
		return nil, fmt.Errorf("broker: unpack %s: an empty batch", msg.UUID)
	}
	out := make([]*message.Message, len(batch.Messages))
	for i, m := range batch.Messages {
		inner := message.NewMessage(m.Id, m.Payload)
		if m.Metadata != nil {
			inner.Metadata = m.Metadata
		}
		for _, k := range []string{RedeliveredHeader, DeliveryCountHeader} {
			if v := msg.Metadata.Get(k); v != "" {
				inner.Metadata.Set(k, v)
			} else {
				delete(inner.Metadata, k)
			}
		}
		inner.SetContext(msg.Context())
		out[i] = inner
	}
	return out, nil
}

// DeliveryMessages returns the messages an AMQP delivery read without
// Watermill carries: the delivery itself, or each message of its batch
// (see Unpack), decoded by [Marshaler]. For taps and tests that read a
// queue with amqp091-go directly.
func DeliveryMessages(d amqp091.Delivery) ([]*message.Message, error) {
	msg, err := Marshaler{}.Unmarshal(d)
	if err != nil {
		return nil, err
	}
	if !IsBatch(msg) {
		return []*message.Message{msg}, nil
	}
	return Unpack(msg)
}
