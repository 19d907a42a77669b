package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"golang.org/x/sync/errgroup"
)

// subscribeConcurrency is how many Subscribe calls SubscribeAll makes at
// once. Each is a few round trips to the broker (a channel opened and
// closed, another opened for consuming, its QoS and its consume), which
// is latency, not work: at 16 a dispatcher's 384 subscriptions take a
// quarter of the time they took one after the other, and far less than
// that on a loaded host, where each round trip is slower.
const subscribeConcurrency = 16

// SubscribeAll connects a subscriber with cfg and subscribes it once for
// each of topics (a topic may repeat: a consumer holds one subscription
// per message it has in hand), up to subscribeConcurrency calls at once.
// It returns the subscriber and the channels in the order of topics; on
// any failure it closes the subscriber and returns the first error.
//
// The topology of cfg (exchange, queue, binding) is declared by the first
// subscription of each queue only: declaring it again for each of a
// queue's hundreds of subscriptions added three round trips apiece, and
// binding a queue goes through the broker's metadata store.
func SubscribeAll(ctx context.Context, cfg amqp.Config, logger *slog.Logger, topics []string) (*amqp.Subscriber, []<-chan *message.Message, error) {
	cfg.TopologyBuilder = &declareOnce{builder: cfg.TopologyBuilder, declared: map[string]bool{}}
	sub, err := amqp.NewSubscriber(cfg, WatermillLogger(logger))
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	channels := make([]<-chan *message.Message, len(topics))
	// A plain group, not errgroup.WithContext: ctx is the subscriptions'
	// lifetime (watermill ends a subscription when it is done), so it must
	// not end when the subscribing does.
	var g errgroup.Group
	g.SetLimit(subscribeConcurrency)
	for i, topic := range topics {
		g.Go(func() error {
			ch, err := sub.Subscribe(ctx, topic)
			if err != nil {
				return fmt.Errorf("subscribe to %s: %w", topic, err)
			}
			channels[i] = ch
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, errors.Join(err, sub.Close())
	}
	return sub, channels, nil
}

// declareOnce is an amqp.TopologyBuilder that builds each queue's topology
// once, with builder. Its lock is held while a queue is declared, so the
// concurrent first subscriptions of a queue wait for its declaration
// rather than consume from a queue that may not exist yet.
type declareOnce struct {
	builder  amqp.TopologyBuilder
	mu       sync.Mutex
	declared map[string]bool
}

func (d *declareOnce) BuildTopology(ch *amqp091.Channel, params amqp.BuildTopologyParams, cfg amqp.Config, logger watermill.LoggerAdapter) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.declared[params.QueueName] {
		return nil
	}
	if err := d.builder.BuildTopology(ch, params, cfg, logger); err != nil {
		return err
	}
	d.declared[params.QueueName] = true
	return nil
}

func (d *declareOnce) ExchangeDeclare(ch *amqp091.Channel, exchange string, cfg amqp.Config) error {
	return d.builder.ExchangeDeclare(ch, exchange, cfg)
}
