package ceiling

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/cronmesh/cronmesh/bench/internal/pause"
)

// BrokerOptions configure the broker measurement.
type BrokerOptions struct {
	URL         string
	Name        string        // exchange and queue name; deleted afterwards
	MessageSize int           // bytes of each message body
	Duration    time.Duration // measured time after a 2 s warm-up (default 15 s)
	Publishers  int           // channels publishing with confirms (default 4)
	InFlight    int           // unconfirmed messages per publisher (default 256)
	Prefetch    int           // consumer prefetch (default 256)
}

// BrokerResult is the measured broker ceiling.
type BrokerResult struct {
	Published, Consumed int           // in the measured time
	Elapsed             time.Duration // the measured time
}

// ConsumedPerSecond is messages published, confirmed, routed to the quorum
// queue, delivered and acknowledged per second.
func (r BrokerResult) ConsumedPerSecond() float64 { return float64(r.Consumed) / r.Elapsed.Seconds() }

// PublishedPerSecond is messages confirmed per second.
func (r BrokerResult) PublishedPerSecond() float64 { return float64(r.Published) / r.Elapsed.Seconds() }

// Broker publishes persistent messages to a durable topic exchange bound to
// a durable quorum queue from several confirming channels, keeping InFlight
// unconfirmed on each (as the trigger's relay pipelines its publishes), and
// consumes them with one acknowledgement per message (as the dispatcher
// does), for Duration; it then deletes the queue and exchange.
func Broker(ctx context.Context, o BrokerOptions) (BrokerResult, error) {
	o.Duration = cmp.Or(o.Duration, 15*time.Second)
	o.Publishers = cmp.Or(o.Publishers, 4)
	o.InFlight = cmp.Or(o.InFlight, 256)
	o.Prefetch = cmp.Or(o.Prefetch, 256)
	o.MessageSize = cmp.Or(o.MessageSize, 400)
	conn, err := amqp091.Dial(o.URL)
	if err != nil {
		return BrokerResult{}, fmt.Errorf("ceiling: rabbitmq: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return BrokerResult{}, err
	}
	if err := ch.ExchangeDeclare(o.Name, "topic", true, false, false, false, nil); err != nil {
		return BrokerResult{}, err
	}
	if _, err := ch.QueueDeclare(o.Name, true, false, false, false, amqp091.Table{"x-queue-type": "quorum"}); err != nil {
		return BrokerResult{}, err
	}
	defer func() {
		if c, err := conn.Channel(); err == nil {
			_, _ = c.QueueDelete(o.Name, false, false, false)
			_ = c.ExchangeDelete(o.Name, false, false)
			_ = c.Close()
		}
	}()
	if err := ch.QueueBind(o.Name, "dispatch.#", o.Name, false, nil); err != nil {
		return BrokerResult{}, err
	}

	var published, consumed atomic.Int64
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, o.Publishers+1)

	// A separate connection for the consumer, as the dispatcher has its own.
	cconn, err := amqp091.Dial(o.URL)
	if err != nil {
		return BrokerResult{}, err
	}
	defer cconn.Close()
	cch, err := cconn.Channel()
	if err != nil {
		return BrokerResult{}, err
	}
	if err := cch.Qos(o.Prefetch, 0, false); err != nil {
		return BrokerResult{}, err
	}
	deliveries, err := cch.Consume(o.Name, "", false, false, false, false, nil)
	if err != nil {
		return BrokerResult{}, err
	}
	wg.Go(func() {
		for {
			select {
			case <-runCtx.Done():
				return
			case d, ok := <-deliveries:
				if !ok {
					return
				}
				if err := d.Ack(false); err != nil {
					errs <- err
					return
				}
				consumed.Add(1)
			}
		}
	})

	body := make([]byte, o.MessageSize)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	for range o.Publishers {
		pch, err := conn.Channel()
		if err != nil {
			return BrokerResult{}, err
		}
		if err := pch.Confirm(false); err != nil {
			return BrokerResult{}, err
		}
		wg.Go(func() {
			defer pch.Close()
			pending := make([]*amqp091.DeferredConfirmation, 0, o.InFlight)
			for runCtx.Err() == nil {
				dc, err := pch.PublishWithDeferredConfirmWithContext(runCtx, o.Name, "dispatch.normal", false, false, amqp091.Publishing{
					DeliveryMode: amqp091.Persistent, ContentType: "application/protobuf", Body: body,
				})
				if err != nil {
					if runCtx.Err() == nil {
						errs <- err
					}
					return
				}
				pending = append(pending, dc)
				if len(pending) < o.InFlight {
					continue
				}
				for _, dc := range pending {
					if ok, err := dc.WaitContext(runCtx); err != nil {
						return
					} else if ok {
						published.Add(1)
					}
				}
				pending = pending[:0]
			}
		})
	}

	result := BrokerResult{}
	if err := pause.For(ctx, 2*time.Second); err != nil {
		return result, err
	}
	p0, c0, t0 := published.Load(), consumed.Load(), time.Now()
	if err := pause.For(ctx, o.Duration); err != nil {
		return result, err
	}
	result = BrokerResult{Published: int(published.Load() - p0), Consumed: int(consumed.Load() - c0), Elapsed: time.Since(t0)}
	stop()
	wg.Wait()
	select {
	case err := <-errs:
		return result, fmt.Errorf("ceiling: rabbitmq: %w", err)
	default:
	}
	return result, nil
}
