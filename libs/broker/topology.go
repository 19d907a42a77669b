package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// QueueBinding is a durable quorum queue bound to a durable topic exchange.
type QueueBinding struct {
	Exchange   string
	Queue      string
	BindingKey string
	// Arguments are extra queue arguments (x-message-ttl, dead-lettering);
	// x-queue-type is always quorum. A queue must always be declared with
	// the same arguments, or RabbitMQ refuses the declaration.
	Arguments map[string]any
}

// DeclareQueues declares the exchanges, quorum queues and bindings,
// idempotently. A producer must declare the queue its messages are meant
// for before it publishes the first one: RabbitMQ confirms a message that no
// queue is bound for and then drops it. It retries while the broker is
// unreachable, with backoff up to 5 s, until ctx is done.
func DeclareQueues(ctx context.Context, amqpURL string, bindings ...QueueBinding) error {
	backoff := 100 * time.Millisecond
	for {
		err := declareQueues(amqpURL, bindings)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func declareQueues(amqpURL string, bindings []QueueBinding) error {
	return onChannel(amqpURL, func(ch *amqp091.Channel) error {
		for _, b := range bindings {
			if err := ch.ExchangeDeclare(b.Exchange, "topic", true, false, false, false, nil); err != nil {
				return fmt.Errorf("broker: declare exchange %q: %w", b.Exchange, err)
			}
			args := amqp091.Table{"x-queue-type": "quorum"}
			for k, v := range b.Arguments {
				args[k] = v
			}
			if _, err := ch.QueueDeclare(b.Queue, true, false, false, false, args); err != nil {
				return fmt.Errorf("broker: declare queue %q: %w", b.Queue, err)
			}
			if err := ch.QueueBind(b.Queue, b.BindingKey, b.Exchange, false, nil); err != nil {
				return fmt.Errorf("broker: bind %q to %q with %q: %w", b.Queue, b.Exchange, b.BindingKey, err)
			}
		}
		return nil
	})
}

// unbindQueue removes the bindings of queue to exchange with keys.
// Removing a binding that does not exist is no error.
func unbindQueue(amqpURL, exchange, queue string, keys []string) error {
	return onChannel(amqpURL, func(ch *amqp091.Channel) error {
		for _, key := range keys {
			if err := ch.QueueUnbind(queue, key, exchange, nil); err != nil {
				return fmt.Errorf("broker: unbind %q from %q with %q: %w", queue, exchange, key, err)
			}
		}
		return nil
	})
}

// onChannel runs f on a channel of a connection of its own, closed after.
func onChannel(amqpURL string, f func(*amqp091.Channel) error) error {
	conn, err := amqp091.DialConfig(amqpURL, amqp091.Config{Dial: amqp091.DefaultDial(dialTimeout)})
	if err != nil {
		return fmt.Errorf("broker: dial: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("broker: open channel: %w", err)
	}
	defer ch.Close()
	return f(ch)
}
