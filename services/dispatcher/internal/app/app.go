package app

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1/dispatcherv1connect"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/keyring"
	"github.com/cronmesh/cronmesh/libs/lifecycle"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/service"
	"github.com/cronmesh/cronmesh/libs/ssrfguard"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/api"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/inflight"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

// Defaults of a dispatcher.
const (
	DefaultListen            = "127.0.0.1:8083"
	DefaultSchema            = "dispatcher"
	DefaultPublisherChannels = 32
	// DefaultCancellationRetention outlives the longest retry series the
	// registry allows (10 retries, each at most 24 h).
	DefaultCancellationRetention = 14 * 24 * time.Hour
	// DefaultCompletionRetention is how long after its slot's time an
	// execution's completion record is remembered for the redelivery
	// dedupe: a republished request arrives within minutes (when the
	// crashed relay's successor runs), and two days leave room for a long
	// outage. Forgetting is safe: an unknown attempt is delivered.
	DefaultCompletionRetention = 48 * time.Hour
	// janitorInterval is how often old cancellations are deleted and the
	// completion records' days maintained.
	janitorInterval = time.Hour
)

// Config is everything a dispatcher is told at start.
type Config struct {
	config.Common
	APIKeys config.StringList
	// Keys says where the managed API keys come from.
	Keys   keyring.Config
	Schema string
	// Broker names. Tests give each run its own.
	DispatchExchange   string
	DispatchQueue      string
	RetryExchange      string
	RetryQueue         string
	RetryTiers         DurationList
	DeadExchange       string
	DeadQueue          string
	ExecutionsExchange string
	// Consumption.
	Prefetch       int
	HighWorkers    int
	NormalWorkers  int
	LowWorkers     int
	DrainerWorkers int
	// Lifecycle events.
	EventBatch      int
	EventLinger     time.Duration
	EventPublishers int
	EventHold       time.Duration
	// StartedEventAfter is how long an attempt runs before its STARTED
	// event is emitted (pipeline.Options.StartedEventAfter); 0: at the
	// start of every attempt.
	StartedEventAfter time.Duration
	// MaxHold: see pipeline.Options.MaxHold.
	MaxHold time.Duration
	// PublisherChannels is the channel pool of the publisher of retries,
	// dead letters, events and redrives.
	PublisherChannels int
	// TargetAMQPURL is the broker AMQP targets publish to; default the
	// AMQPURL.
	TargetAMQPURL string
	// TargetAMQPAllow gives namespaces AMQP names outside their own
	// "<namespace>." prefix (targetcheck.ParseAllowList); the registry
	// must be given the same list.
	TargetAMQPAllow config.StringList
	// AllowNetworks are CIDRs the SSRF guard lets through (loopback for
	// tests and `make dev`).
	AllowNetworks config.StringList
	// CancellationRetention is how long a cancellation is kept.
	CancellationRetention time.Duration
	// CompletionRetention is how long after its slot's time a completed
	// attempt is remembered for the redelivery dedupe (whole days of
	// slots are dropped at once, so a record may live up to a day longer).
	CompletionRetention time.Duration
}

// Register adds the dispatcher's flags to fs.
func (c *Config) Register(fs *flag.FlagSet) {
	service.RegisterFlags(fs, &c.Common, DefaultListen, &c.APIKeys, &c.Keys)
	fs.StringVar(&c.Schema, "schema", DefaultSchema, "PostgreSQL schema of the dispatcher's tables")
	fs.StringVar(&c.DispatchExchange, "dispatch-exchange", pipeline.DefaultDispatchExchange, "exchange of dispatch requests")
	fs.StringVar(&c.DispatchQueue, "dispatch-queue", pipeline.DefaultDispatchQueue, "prefix of the per-priority dispatch queues (<prefix>.high, .normal, .low)")
	fs.StringVar(&c.RetryExchange, "retry-exchange", pipeline.DefaultRetryExchange, "exchange of the delay tiers")
	fs.StringVar(&c.RetryQueue, "retry-queue", pipeline.DefaultRetryQueue, "prefix of the delay tier queues (<prefix>.<ms>ms)")
	c.RetryTiers = broker.DefaultRetryTiers()
	fs.Var(&c.RetryTiers, "retry-tiers", "comma-separated delay tiers (Go durations, whole milliseconds); a retry waits in the smallest tier not shorter than its backoff")
	fs.StringVar(&c.DeadExchange, "dead-exchange", pipeline.DefaultDeadExchange, "exchange of dead letters")
	fs.StringVar(&c.DeadQueue, "dead-queue", pipeline.DefaultDeadQueue, "queue of dead letters, drained into the dead-letter store")
	fs.StringVar(&c.ExecutionsExchange, "executions-exchange", pipeline.DefaultExecutionsExchange, "exchange of execution lifecycle events")
	fs.IntVar(&c.Prefetch, "prefetch", pipeline.DefaultPrefetch, "messages each dispatch worker has in hand, each on its own AMQP channel with a prefetch of one")
	fs.IntVar(&c.HighWorkers, "workers-high", pipeline.DefaultHighWorkers, "concurrent deliveries of high-priority requests")
	fs.IntVar(&c.NormalWorkers, "workers-normal", pipeline.DefaultNormalWorkers, "concurrent deliveries of normal-priority requests")
	fs.IntVar(&c.LowWorkers, "workers-low", pipeline.DefaultLowWorkers, "concurrent deliveries of low-priority requests")
	fs.IntVar(&c.DrainerWorkers, "drainer-workers", pipeline.DefaultDrainerWorkers, "dead letters stored at once (one insert)")
	fs.IntVar(&c.EventBatch, "event-batch", pipeline.DefaultEventBatch, "most lifecycle events in one broker message")
	fs.DurationVar(&c.EventLinger, "event-linger", pipeline.DefaultEventLinger, "how long a batch of lifecycle events waits to fill (negative: not at all)")
	fs.IntVar(&c.EventPublishers, "event-publishers", pipeline.DefaultEventPublishers, "event batches published at once")
	fs.DurationVar(&c.EventHold, "event-hold", pipeline.DefaultEventHold, "how long at most lifecycle events are held back while requests wait for a delivery slot, so that a crowd of slots is delivered first (negative: never)")
	fs.DurationVar(&c.MaxHold, "max-hold", pipeline.DefaultMaxHold, "hold a request the trigger fired ahead of its slot until its time, but no longer than this (its clock and this host's disagree)")
	fs.DurationVar(&c.StartedEventAfter, "started-event-after", pipeline.DefaultStartedEventAfter, "emit an attempt's STARTED event only once it has run this long (0: at the start of every attempt); a quicker attempt emits only its outcome, which carries its start, so consumers decode and write one event instead of two")
	fs.IntVar(&c.PublisherChannels, "publisher-channels", DefaultPublisherChannels, "AMQP channels of the publisher of retries, dead letters, events and redrives")
	fs.StringVar(&c.TargetAMQPURL, "target-amqp-url", "", "broker that AMQP targets publish to (default: --amqp-url); a separate vhost or a user allowed only the tenants' names keeps targets out of cronmesh's own topology at the broker too")
	fs.Var(&c.TargetAMQPAllow, "target-amqp-allow", "comma-separated namespace=name or namespace=prefix* entries: AMQP names a namespace's targets may publish to besides its own <namespace>.* (same list as the registry's)")
	fs.Var(&c.AllowNetworks, "allow-networks", "comma-separated CIDRs that targets may resolve to although loopback, private or link-local (e.g. 127.0.0.0/8,::1/128 for development)")
	fs.DurationVar(&c.CancellationRetention, "cancellation-retention", DefaultCancellationRetention, "how long cancellations are kept")
	fs.DurationVar(&c.CompletionRetention, "completion-retention", DefaultCompletionRetention, "how long after its slot's time a completed attempt is remembered, so that a redelivery of it is not delivered again (whole days are dropped)")
}

func (c *Config) fillDefaults() {
	c.Schema = cmp.Or(c.Schema, DefaultSchema)
	c.PublisherChannels = cmp.Or(c.PublisherChannels, DefaultPublisherChannels)
	c.TargetAMQPURL = cmp.Or(c.TargetAMQPURL, c.AMQPURL)
	c.CancellationRetention = cmp.Or(c.CancellationRetention, DefaultCancellationRetention)
	c.CompletionRetention = cmp.Or(c.CompletionRetention, DefaultCompletionRetention)
}

// allowedNetworks parses AllowNetworks (ssrfguard.ParseNetworks).
func (c *Config) allowedNetworks() ([]netip.Prefix, error) {
	out, err := ssrfguard.ParseNetworks(c.AllowNetworks)
	if err != nil {
		return nil, fmt.Errorf("--allow-networks: %w", err)
	}
	return out, nil
}

// amqpPolicy is where AMQP targets may publish: the allow-list, and never
// to one of the dispatcher's own exchanges and queues, whatever they are
// named (a start fails when a namespace could reach one).
func (c *Config) amqpPolicy() (*targetcheck.AMQPPolicy, error) {
	allow, err := targetcheck.ParseAllowList(c.TargetAMQPAllow)
	if err != nil {
		return nil, fmt.Errorf("--target-amqp-allow: %w", err)
	}
	return targetcheck.NewAMQPPolicy(targetcheck.AMQPPolicyOptions{
		Internal: []targetcheck.InternalName{
			{Flag: "dispatch-exchange", Name: cmp.Or(c.DispatchExchange, pipeline.DefaultDispatchExchange)},
			{Flag: "dispatch-queue", Name: cmp.Or(c.DispatchQueue, pipeline.DefaultDispatchQueue), Family: true},
			{Flag: "retry-exchange", Name: cmp.Or(c.RetryExchange, pipeline.DefaultRetryExchange)},
			{Flag: "retry-queue", Name: cmp.Or(c.RetryQueue, pipeline.DefaultRetryQueue), Family: true},
			{Flag: "dead-exchange", Name: cmp.Or(c.DeadExchange, pipeline.DefaultDeadExchange)},
			{Flag: "dead-queue", Name: cmp.Or(c.DeadQueue, pipeline.DefaultDeadQueue)},
			{Flag: "executions-exchange", Name: cmp.Or(c.ExecutionsExchange, pipeline.DefaultExecutionsExchange)},
		},
		Allow: allow,
	})
}

// DurationList is a flag.Value of comma-separated Go durations; Set
// replaces the list.
type DurationList []time.Duration

// String joins the durations with commas; safe on a nil receiver.
func (l *DurationList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, d := range *l {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

// Set parses v; an empty v is the empty list (the pipeline's defaults).
func (l *DurationList) Set(v string) error {
	var out DurationList
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		d, err := time.ParseDuration(item)
		if err != nil {
			return err
		}
		out = append(out, d)
	}
	*l = out
	return nil
}

// Option changes how New builds a dispatcher.
type Option func(*options)

type options struct {
	deliverer deliver.Deliverer
}

// WithDeliverer makes the dispatcher deliver with d instead of the real
// HTTP/AMQP client (tests). --allow-networks and --target-amqp-url are
// then unused.
func WithDeliverer(d deliver.Deliverer) Option { return func(o *options) { o.deliverer = d } }

// App is a running dispatcher.
type App struct {
	cfg    Config
	logger *slog.Logger
	svc    *service.Service
	store  *store.Store
}

// New connects to PostgreSQL (applying migrations) and builds every part.
// Nothing runs and nothing connects to RabbitMQ until Run.
func New(ctx context.Context, cfg Config, logger *slog.Logger, opts ...Option) (_ *App, err error) {
	cfg.fillDefaults()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	allowed, err := cfg.allowedNetworks()
	if err != nil {
		return nil, err
	}
	amqpPolicy, err := cfg.amqpPolicy()
	if err != nil {
		return nil, err
	}
	// The configured keys, and the managed ones polled from the registry.
	svc, err := service.New(ctx, service.Options{
		Name: "dispatcher", Config: cfg.Common, Logger: logger,
		Keys: &cfg.Keys, APIKeys: cfg.APIKeys,
		Database: &service.Database{Schema: cfg.Schema, Migrations: store.Migrations},
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			svc.Close(context.Background())
		}
	}()
	a := &App{cfg: cfg, logger: logger, svc: svc}
	a.store, err = store.New(store.Options{Pool: svc.Pool})
	if err != nil {
		return nil, err
	}
	// Today's records need today's partition before the first of them is
	// written (see store.MaintainCompletions); the janitor keeps the days
	// from then on.
	if _, _, err := a.store.MaintainCompletions(ctx, time.Now(), cfg.CompletionRetention); err != nil {
		return nil, err
	}

	publisher, err := broker.NewPublisher(broker.PublisherOptions{
		Config: broker.RoutedPublisherConfig(cfg.AMQPURL, cfg.PublisherChannels),
		Logger: logger.With(slog.String("component", "publisher")),
	})
	if err != nil {
		return nil, err
	}
	svc.OnClose("publisher", func(context.Context) error { return publisher.Close() })
	deliverer := o.deliverer
	if deliverer == nil {
		targets, err := broker.NewPublisher(broker.PublisherOptions{
			Config: deliver.PublisherConfig(cfg.TargetAMQPURL, cfg.PublisherChannels),
			Logger: logger.With(slog.String("component", "target-publisher")),
		})
		if err != nil {
			return nil, err
		}
		svc.OnClose("target publisher", func(context.Context) error { return targets.Close() })
		deliverer, err = deliver.New(deliver.Options{
			AllowedNetworks: allowed,
			Publisher:       targets,
			AMQPPolicy:      amqpPolicy,
			TracerProvider:  svc.Telemetry.TracerProvider,
			Propagator:      svc.Telemetry.Propagator,
			Logger:          logger.With(slog.String("component", "deliver")),
		})
		if err != nil {
			return nil, err
		}
	}
	cancels, err := inflight.NewWatcher(inflight.WatcherOptions{
		Feed:      a.store,
		Registry:  inflight.NewRegistry(),
		Retention: cfg.CancellationRetention,
		Logger:    logger.With(slog.String("component", "cancellations")),
	})
	if err != nil {
		return nil, err
	}
	pipe, err := pipeline.New(pipeline.Options{
		AMQPURL:            cfg.AMQPURL,
		Publisher:          publisher,
		Deliverer:          deliverer,
		Checks:             a.store,
		Cancels:            cancels,
		Overlap:            a.store,
		DispatchExchange:   cfg.DispatchExchange,
		DispatchQueue:      cfg.DispatchQueue,
		RetryExchange:      cfg.RetryExchange,
		RetryQueue:         cfg.RetryQueue,
		RetryTiers:         cfg.RetryTiers,
		DeadExchange:       cfg.DeadExchange,
		DeadQueue:          cfg.DeadQueue,
		ExecutionsExchange: cfg.ExecutionsExchange,
		Prefetch:           cfg.Prefetch,
		Workers:            pipeline.Workers{High: cfg.HighWorkers, Normal: cfg.NormalWorkers, Low: cfg.LowWorkers},
		EventBatch:         cfg.EventBatch,
		EventLinger:        cfg.EventLinger,
		EventPublishers:    cfg.EventPublishers,
		EventHold:          cfg.EventHold,
		StartedEventAfter:  cfg.StartedEventAfter,
		MaxHold:            cfg.MaxHold,
		DrainTimeout:       cfg.ShutdownTimeout,
		TracerProvider:     svc.Telemetry.TracerProvider,
		Propagator:         svc.Telemetry.Propagator,
		Metrics:            svc.Metrics,
		Logger:             logger.With(slog.String("component", "pipeline")),
		Clock:              clock.Real{},
	})
	if err != nil {
		return nil, err
	}
	drainer, err := pipeline.NewDrainer(pipeline.DrainerOptions{
		AMQPURL:        cfg.AMQPURL,
		Store:          a.store,
		DeadExchange:   cfg.DeadExchange,
		DeadQueue:      cfg.DeadQueue,
		Workers:        cfg.DrainerWorkers,
		TracerProvider: svc.Telemetry.TracerProvider,
		Propagator:     svc.Telemetry.Propagator,
		Metrics:        svc.Metrics,
		Logger:         logger.With(slog.String("component", "drainer")),
	})
	if err != nil {
		return nil, err
	}

	handler, err := api.NewHandler(api.Options{
		Store:            a.store,
		Publisher:        publisher,
		DispatchExchange: cfg.DispatchExchange,
		Targets:          targetcheck.New(amqpPolicy),
		Cancels:          cancels,
		Propagator:       svc.Telemetry.Propagator,
		Logger:           logger.With(slog.String("component", "api")),
	})
	if err != nil {
		return nil, err
	}
	path, h := dispatcherv1connect.NewDispatchServiceHandler(handler, svc.HandlerOptions()...)
	svc.Server.Handle(dispatcherv1connect.DispatchServiceName, path, h)
	// Everything stops with the server: the pipeline's deliveries under
	// way have the shutdown timeout, as the server's calls do. The
	// dispatcher is ready once the pipeline (which declares the whole
	// topology first) and the drainer are subscribed.
	svc.WithServer(
		lifecycle.Part{Name: "cancellation watcher", Run: cancels.Run},
		lifecycle.Part{Name: "pipeline", Run: pipe.Run, Ready: pipe.Ready()},
		lifecycle.Part{Name: "dead-letter drainer", Run: drainer.Run, Ready: drainer.Ready()},
		lifecycle.Part{Name: "janitor", Run: a.janitor},
	)
	return a, nil
}

// Server is the dispatcher's API server.
func (a *App) Server() *server.Server { return a.svc.Server }

// Run runs the dispatcher until ctx is done or a part cannot run.
// Readiness (grpc.health.v1 SERVING) waits until the pipeline and the
// dead-letter drainer are subscribed (the pipeline declares the whole
// topology first). Shutdown: the API stops taking calls and finishes its
// own within the shutdown timeout; at the same time the pipeline stops
// consuming, lets deliveries under way finish within the shutdown timeout
// (the others are requeued) and flushes their events; the drainer finishes
// the dead letters in hand; then the connections close.
func (a *App) Run(ctx context.Context) error { return a.svc.Run(ctx) }

// janitor deletes cancellations older than their retention, at start and
// hourly, and keeps the completion records' day partitions (days ahead
// created, days past the retention dropped) hourly after New's run. A
// failure is logged and tried again next time.
func (a *App) janitor(ctx context.Context) error {
	for {
		if n, err := a.store.DeleteCancellationsBefore(ctx, time.Now().Add(-a.cfg.CancellationRetention)); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			a.logger.Warn("deleting old cancellations", slog.Any("error", err))
		} else if n > 0 {
			a.logger.Info("deleted old cancellations", slog.Int("count", n))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(janitorInterval):
		}
		if res, trimmed, err := a.store.MaintainCompletions(ctx, time.Now(), a.cfg.CompletionRetention); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			a.logger.Warn("maintaining the completion records' days", slog.Any("error", err))
		} else if len(res.Dropped) > 0 || len(res.Created) > 0 || trimmed > 0 {
			a.logger.Info("maintained the completion records' days", slog.Int("created", len(res.Created)),
				slog.Int("dropped", len(res.Dropped)), slog.Int64("trimmed", trimmed), slog.Int("days", res.Days))
		}
	}
}

// Serve builds the app from cfg and runs it until ctx is done: the binary's
// serve command (libs/servicemain).
func Serve(ctx context.Context, cfg Config, logger *slog.Logger) error {
	a, err := New(ctx, cfg, logger)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
