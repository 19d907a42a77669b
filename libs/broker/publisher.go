package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// ErrPublisherClosed is returned by [Publisher.Publish] after
// [Publisher.Close].
var ErrPublisherClosed = errors.New("broker: publisher closed")

// ErrNotConfirmed is wrapped by the error [Publisher.Publish] returns when
// the broker negatively acknowledged a message, or the channel closed before
// the confirm arrived. The message may or may not have been enqueued.
var ErrNotConfirmed = errors.New("broker: publish not confirmed")

// PublisherOptions configures [NewPublisher].
type PublisherOptions struct {
	// Config is the watermill-amqp publisher config, normally from
	// [TopicPublisherConfig]. Required. Used: Connection (URI, AmqpConfig,
	// TLSConfig), Marshaler, Exchange, Publish.GenerateRoutingKey,
	// Publish.ConfirmDelivery, Publish.ChannelPoolSize and TopologyBuilder.
	// Transactional, Mandatory and Immediate publishing are not supported.
	Config amqp.Config
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
	// RedialInterval is the minimum time between two connection attempts
	// after a failed one; Publish calls in between fail fast with the last
	// dial error. Default 1s.
	RedialInterval time.Duration
	// ConfirmTimeout bounds the wait for one message's confirm on top of
	// the message's own context. Default 30s.
	ConfirmTimeout time.Duration
}

// Publisher is a [message.Publisher] for RabbitMQ driven by a
// watermill-amqp [amqp.Config], with publisher confirms. It replaces
// watermill-amqp's own Publisher (v3.1.0) for services, which is unusable
// across connection loss:
//
//   - its reconnect goroutine writes connection state that concurrent
//     Publish calls read without synchronization (a data race the race
//     detector reports whenever the connection drops under load);
//   - a pooled channel whose re-open fails during the reconnect is dropped
//     from the pool, so Publish blocks forever once the pool is empty, and
//     Close then panics on the dropped channel's nil AMQP channel;
//   - NewPublisher dials at construction, so a service could not start
//     while RabbitMQ is down.
//
// Publisher connects on first use and, after the connection is lost, again
// on a later Publish (at most once per RedialInterval); until then Publish
// returns an error and the caller (for example the outbox relay) retries.
// There is no background reconnect goroutine.
//
// Channels are pooled, at most Publish.ChannelPoolSize (16 if 0) at a time:
// each Publish call holds one channel and waits for every message's confirm
// before returning, so concurrent Publish calls are the source of
// throughput. The exchange is declared through the config's TopologyBuilder
// the first time each exchange name is used on a connection.
//
// Publisher is safe for concurrent use.
type Publisher struct {
	cfg            amqp.Config
	log            *slog.Logger
	redial         time.Duration
	confirmTimeout time.Duration
	poolSize       int

	mu       sync.Mutex
	cur      *connection
	lastErr  error
	lastDial time.Time
	closed   bool
}

// NewPublisher validates opts and returns a Publisher. It does not connect:
// a broker that is down is reported by Publish, not here. It fails on an
// invalid config or unsupported Publish options. A topic that maps to the
// exchange name "" publishes through the default exchange, undeclared.
func NewPublisher(opts PublisherOptions) (*Publisher, error) {
	cfg := opts.Config
	if err := cfg.ValidatePublisher(); err != nil {
		return nil, fmt.Errorf("broker: invalid publisher config: %w", err)
	}
	switch {
	case cfg.Publish.Transactional || cfg.Publish.Mandatory || cfg.Publish.Immediate:
		return nil, errors.New("broker: transactional, mandatory and immediate publishing are not supported")
	case cfg.Publish.ChannelPoolSize < 0 || opts.RedialInterval < 0 || opts.ConfirmTimeout < 0:
		return nil, errors.New("broker: negative ChannelPoolSize, RedialInterval or ConfirmTimeout")
	case cfg.Connection.TLSConfig != nil && cfg.Connection.AmqpConfig != nil && cfg.Connection.AmqpConfig.TLSClientConfig != nil:
		return nil, errors.New("broker: both Connection.TLSConfig and Connection.AmqpConfig.TLSClientConfig are set")
	}
	if cfg.TopologyBuilder == nil {
		cfg.TopologyBuilder = &amqp.DefaultTopologyBuilder{}
	}
	return &Publisher{
		cfg:            cfg,
		log:            cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		redial:         cmp.Or(opts.RedialInterval, time.Second),
		confirmTimeout: cmp.Or(opts.ConfirmTimeout, 30*time.Second),
		poolSize:       cmp.Or(cfg.Publish.ChannelPoolSize, DefaultChannelPoolSize),
	}, nil
}

// Publish publishes msgs in order to the exchange of the config with the
// routing key derived from topic (with [TopicPublisherConfig], topic is the
// routing key), and returns after the broker confirmed all of them (when
// ConfirmDelivery is set). A non-nil error means some messages may not have
// been published, and some may have been. It is [Publisher.PublishInOrder]
// with one topic for every message.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	topics := make([]string, len(msgs))
	for i := range topics {
		topics[i] = topic
	}
	_, err := p.PublishInOrder(topics, msgs)
	return err
}

// PublishInOrder publishes msgs[i] to topics[i], in order on one channel,
// and returns the number of leading messages the broker confirmed: all of
// them and a nil error, or the confirmed prefix and the error that ended it.
// Messages after that prefix may or may not have reached the broker, so a
// caller that retries them delivers at least once and, retrying only from
// the prefix on, never lets a later message overtake an earlier one.
//
// Publishing is pipelined: every message is sent before the first confirm
// is awaited, so a batch costs about one broker round trip instead of one
// per message (a channel in confirm mode confirms in publish order). This
// is what lets one relay lane move thousands of messages a second.
//
// Each message's Context bounds the wait for its confirm (the first
// message's also the wait for a pooled channel); canceling it makes the
// call return the context's error, though the message may still reach the
// broker. PublishInOrder connects first when there is no live connection,
// and returns the dial error if that fails. It panics if the slices differ
// in length.
func (p *Publisher) PublishInOrder(topics []string, msgs []*message.Message) (int, error) {
	if len(topics) != len(msgs) {
		panic("broker: PublishInOrder needs one topic per message")
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	ctx := msgs[0].Context()
	conn, err := p.connection()
	if err != nil {
		return 0, err
	}
	ch, err := conn.acquire(ctx, p.cfg.Publish.ConfirmDelivery)
	if err != nil {
		p.dropIfDead(conn)
		return 0, err
	}
	defer conn.release(ch)

	pending := make([]*amqp091.DeferredConfirmation, 0, len(msgs))
	var sendErr error
	for i, msg := range msgs {
		exchange := p.cfg.Exchange.GenerateName(topics[i])
		if err := conn.declare(ch, exchange, p.cfg); err != nil {
			sendErr = err
			break
		}
		dc, err := p.send(ch, exchange, p.cfg.Publish.GenerateRoutingKey(topics[i]), msg)
		if err != nil {
			// The exchange may have been deleted behind our back (the
			// broker then closes the channel with NOT_FOUND): declare it
			// again next time rather than fail until the next connection.
			conn.forget(exchange)
			sendErr = err
			break
		}
		pending = append(pending, dc)
	}
	for i, dc := range pending {
		if err := p.awaitConfirm(msgs[i], dc); err != nil {
			// A publish to a deleted exchange fails here when the broker
			// closes the channel, possibly on an earlier message's confirm
			// than the culprit's: declare every exchange of the batch again
			// next time.
			for _, topic := range topics {
				conn.forget(p.cfg.Exchange.GenerateName(topic))
			}
			p.dropIfDead(conn)
			return i, err
		}
	}
	if sendErr != nil {
		p.dropIfDead(conn)
	}
	return len(pending), sendErr
}

// send publishes msg on ch; the confirmation is nil when confirms are off.
func (p *Publisher) send(ch *amqp091.Channel, exchange, key string, msg *message.Message) (*amqp091.DeferredConfirmation, error) {
	publishing, err := p.cfg.Marshaler.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("broker: marshal message %s: %w", msg.UUID, err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(msg.Context(), exchange, key, false, false, publishing)
	if err != nil {
		return nil, fmt.Errorf("broker: publish message %s: %w", msg.UUID, err)
	}
	return dc, nil
}

// awaitConfirm waits for dc (nil: confirms are off), bounded by the
// message's context and ConfirmTimeout.
func (p *Publisher) awaitConfirm(msg *message.Message, dc *amqp091.DeferredConfirmation) error {
	if dc == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(msg.Context(), p.confirmTimeout)
	defer cancel()
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("broker: waiting for confirm of message %s: %w", msg.UUID, err)
	}
	if !acked {
		return fmt.Errorf("broker: message %s: %w", msg.UUID, ErrNotConfirmed)
	}
	return nil
}

// Close closes the connection, failing publishes in progress (their
// pending confirms resolve as not confirmed), within CloseTimeout even when
// the broker is unreachable. Publish calls after Close
// return [ErrPublisherClosed]. Close is idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	conn := p.cur
	p.cur = nil
	p.closed = true
	p.mu.Unlock()
	if conn == nil {
		return nil
	}
	return conn.close()
}

// connection returns the live connection, dialing when there is none. Dialing
// under the mutex is deliberate: concurrent callers wait for one dial
// instead of storming the broker with one dial each, and the dial is bounded
// by the dial timeout of the config.
func (p *Publisher) connection() (*connection, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPublisherClosed
	}
	if p.cur != nil {
		if !p.cur.conn.IsClosed() {
			return p.cur, nil
		}
		p.log.Warn("broker: RabbitMQ connection lost; reconnecting on next publish")
		_ = p.cur.close()
		p.cur = nil
	}
	if p.lastErr != nil && time.Since(p.lastDial) < p.redial {
		return nil, p.lastErr
	}
	p.lastDial = time.Now()
	conn, err := p.dial()
	if err != nil {
		p.lastErr = fmt.Errorf("broker: connect to RabbitMQ: %w", err)
		p.log.Warn("broker: cannot connect to RabbitMQ", "error", err)
		return nil, p.lastErr
	}
	p.log.Info("broker: connected to RabbitMQ")
	p.cur, p.lastErr = newConnection(conn, p.poolSize), nil
	return p.cur, nil
}

func (p *Publisher) dial() (*amqp091.Connection, error) {
	c := p.cfg.Connection
	if c.AmqpConfig != nil {
		cfg := *c.AmqpConfig
		if c.TLSConfig != nil {
			cfg.TLSClientConfig = c.TLSConfig
		}
		return amqp091.DialConfig(c.AmqpURI, cfg)
	}
	if c.TLSConfig != nil {
		return amqp091.DialTLS(c.AmqpURI, c.TLSConfig)
	}
	return amqp091.Dial(c.AmqpURI)
}

// dropIfDead forgets conn once it is closed, so that the next Publish dials
// instead of failing on it until RedialInterval-bounded retries.
func (p *Publisher) dropIfDead(conn *connection) {
	if !conn.conn.IsClosed() {
		return
	}
	p.mu.Lock()
	if p.cur == conn {
		p.cur = nil
		p.log.Warn("broker: RabbitMQ connection lost; reconnecting on next publish")
	}
	p.mu.Unlock()
	_ = conn.close()
}

// connection is one AMQP connection with its channel pool.
type connection struct {
	conn *amqp091.Connection
	// slots holds one token per channel that may be in use; taking a token
	// bounds concurrency to the pool size.
	slots chan struct{}

	mu       sync.Mutex
	idle     []*amqp091.Channel
	declared map[string]bool
}

func newConnection(conn *amqp091.Connection, poolSize int) *connection {
	slots := make(chan struct{}, poolSize)
	for range poolSize {
		slots <- struct{}{}
	}
	return &connection{conn: conn, slots: slots, declared: map[string]bool{}}
}

// acquire returns an open channel, reusing an idle one or opening a new one
// (in confirm mode when confirm is set), waiting for a free slot while ctx
// allows.
func (c *connection) acquire(ctx context.Context, confirm bool) (*amqp091.Channel, error) {
	select {
	case <-c.slots:
	case <-ctx.Done():
		return nil, fmt.Errorf("broker: waiting for a channel: %w", ctx.Err())
	}
	c.mu.Lock()
	for len(c.idle) > 0 {
		ch := c.idle[len(c.idle)-1]
		c.idle = c.idle[:len(c.idle)-1]
		if !ch.IsClosed() {
			c.mu.Unlock()
			return ch, nil
		}
	}
	c.mu.Unlock()

	ch, err := c.conn.Channel()
	if err == nil && confirm {
		if err = ch.Confirm(false); err != nil {
			_ = ch.Close()
		}
	}
	if err != nil {
		c.slots <- struct{}{}
		return nil, fmt.Errorf("broker: open channel: %w", err)
	}
	return ch, nil
}

// release returns ch to the pool. A channel closed by an error (the broker
// closes a channel on, for example, a publish to a missing exchange) is
// dropped; a new one is opened on demand.
func (c *connection) release(ch *amqp091.Channel) {
	if !ch.IsClosed() {
		c.mu.Lock()
		c.idle = append(c.idle, ch)
		c.mu.Unlock()
	}
	c.slots <- struct{}{}
}

// declare declares exchange once per connection. The declaration is cached
// only on success, so a failed one is retried by the next Publish.
func (c *connection) declare(ch *amqp091.Channel, exchange string, cfg amqp.Config) error {
	if exchange == "" {
		return nil
	}
	c.mu.Lock()
	done := c.declared[exchange]
	c.mu.Unlock()
	if done {
		return nil
	}
	if err := cfg.TopologyBuilder.ExchangeDeclare(ch, exchange, cfg); err != nil {
		return fmt.Errorf("broker: declare exchange %q: %w", exchange, err)
	}
	c.mu.Lock()
	c.declared[exchange] = true
	c.mu.Unlock()
	return nil
}

// forget makes the next Publish to exchange on this connection declare it.
func (c *connection) forget(exchange string) {
	c.mu.Lock()
	delete(c.declared, exchange)
	c.mu.Unlock()
}

// close closes the connection, which closes its channels, waiting for the
// broker's answer at most CloseTimeout.
func (c *connection) close() error {
	if c.conn.IsClosed() {
		return nil
	}
	return c.conn.CloseDeadline(time.Now().Add(CloseTimeout))
}
