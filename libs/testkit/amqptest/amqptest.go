package amqptest

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// DefaultURL is the RabbitMQ of the development environment, used when
// CRONMESH_TEST_AMQP_URL is unset.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// URLEnv names the environment variable that overrides [DefaultURL].
const URLEnv = "CRONMESH_TEST_AMQP_URL"

// URL returns $CRONMESH_TEST_AMQP_URL, or [DefaultURL] when it is unset or
// empty.
func URL() string {
	if u := os.Getenv(URLEnv); u != "" {
		return u
	}
	return DefaultURL
}

// UniqueName returns prefix followed by "." and 16 random hex digits, a valid
// exchange or queue name that no other test uses. prefix should itself be a
// valid AMQP name (letters, digits, '-', '_', '.', ':').
func UniqueName(t testing.TB, prefix string) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("amqptest: random name: %v", err)
	}
	return prefix + "." + hex.EncodeToString(b[:])
}

// Dial connects to [URL] and closes the connection in t.Cleanup. It fails the
// test when RabbitMQ is unreachable.
func Dial(t testing.TB) *amqp091.Connection {
	t.Helper()
	conn, err := amqp091.DialConfig(URL(), amqp091.Config{
		Dial:   amqp091.DefaultDial(5 * time.Second),
		Locale: "en_US",
	})
	if err != nil {
		t.Fatalf("amqptest: RabbitMQ is unreachable at %s: %v\n"+
			"The tests need a running RabbitMQ: run `make test`, which starts it (or `make services`).",
			redact(URL()), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Channel opens a channel on a fresh connection from [Dial]; both are
// closed in t.Cleanup.
func Channel(t testing.TB) *amqp091.Channel {
	t.Helper()
	ch, err := Dial(t).Channel()
	if err != nil {
		t.Fatalf("amqptest: open channel: %v", err)
	}
	return ch
}

// DeclareTopicQueue declares the durable topic exchange named exchange and a
// new durable classic queue with a unique name bound to it with bindingKey,
// and returns the queue name. t.Cleanup deletes the queue and the exchange
// (deleting an exchange that is already gone is not an error), so exchange
// should be unique to the test too (see [UniqueName]).
func DeclareTopicQueue(t testing.TB, exchange, bindingKey string) string {
	t.Helper()
	return DeclareTopicQueueArgs(t, exchange, bindingKey, nil)
}

// DeclareTopicQueueArgs is [DeclareTopicQueue] with queue arguments, for
// example amqp091.Table{"x-queue-type": "quorum"}.
func DeclareTopicQueueArgs(t testing.TB, exchange, bindingKey string, args amqp091.Table) string {
	t.Helper()
	conn := Dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("amqptest: open channel: %v", err)
	}
	defer ch.Close()

	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatalf("amqptest: declare exchange %q: %v", exchange, err)
	}
	queue := UniqueName(t, "q")
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		t.Fatalf("amqptest: declare queue %q: %v", queue, err)
	}
	if err := ch.QueueBind(queue, bindingKey, exchange, false, nil); err != nil {
		t.Fatalf("amqptest: bind queue %q to %q with %q: %v", queue, exchange, bindingKey, err)
	}
	t.Cleanup(func() {
		// A fresh channel: a failed operation closes an AMQP channel, and
		// the test may have left it in any state.
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("amqptest: cleanup channel: %v", err)
			return
		}
		defer ch.Close()
		if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
			t.Errorf("amqptest: delete queue %q: %v", queue, err)
		}
		if err := ch.ExchangeDelete(exchange, false, false); err != nil {
			t.Errorf("amqptest: delete exchange %q: %v", exchange, err)
		}
	})
	return queue
}

// Consume reads n messages from queue and returns them in delivery order,
// failing the test if they do not all arrive within timeout. The returned
// messages are acknowledged; anything the broker pushed beyond n is left
// unacknowledged and returns to the queue when Consume's channel closes.
func Consume(t testing.TB, queue string, n int, timeout time.Duration) []amqp091.Delivery {
	t.Helper()
	conn := Dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("amqptest: open channel: %v", err)
	}
	defer ch.Close()
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatalf("amqptest: consume %q: %v", queue, err)
	}
	got := make([]amqp091.Delivery, 0, n)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for len(got) < n {
		select {
		case d, ok := <-deliveries:
			if !ok {
				t.Fatalf("amqptest: consumer on %q closed after %d of %d messages", queue, len(got), n)
			}
			if err := d.Ack(false); err != nil {
				t.Fatalf("amqptest: ack: %v", err)
			}
			got = append(got, d)
		case <-timer.C:
			t.Fatalf("amqptest: got %d of %d messages from %q within %v", len(got), n, queue, timeout)
		}
	}
	return got
}

// Drain removes and returns every message currently in queue, in queue
// order, using basic.get until the queue is empty. It does not wait for
// messages still in flight: use it once the publisher has had every message
// confirmed, to assert an exact count.
func Drain(t testing.TB, queue string) []amqp091.Delivery {
	t.Helper()
	ch := Channel(t)
	defer ch.Close()
	var got []amqp091.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("amqptest: get from %q: %v", queue, err)
		}
		if !ok {
			return got
		}
		got = append(got, d)
	}
}

// redact hides the password of an AMQP URL for error messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// DeleteOnCleanup deletes queues and exchanges that a service under test
// declares itself (amqptest did not make them) when the test ends. Register
// it before the cleanup that stops the service: cleanups run last first,
// so the deletion comes after the stop (deleting a queue under a running
// consumer closes its channel). Quorum queues left behind accumulate in
// the broker across runs; a few hundred of them slow RabbitMQ until it no
// longer answers. Deleting what does not exist succeeds.
func DeleteOnCleanup(t testing.TB, queues, exchanges []string) {
	t.Helper()
	t.Cleanup(func() {
		ch := Channel(t)
		for _, q := range queues {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				t.Errorf("amqptest: delete queue %q: %v", q, err)
				return // the failure closed the channel
			}
		}
		for _, x := range exchanges {
			if err := ch.ExchangeDelete(x, false, false); err != nil {
				t.Errorf("amqptest: delete exchange %q: %v", x, err)
				return
			}
		}
	})
}
