package app

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1/triggerv1connect"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/etcdclient"
	"github.com/cronmesh/cronmesh/libs/keyring"
	"github.com/cronmesh/cronmesh/libs/lifecycle"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/libs/quota"
	"github.com/cronmesh/cronmesh/libs/ring"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/service"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
	"github.com/cronmesh/cronmesh/services/trigger/internal/api"
	"github.com/cronmesh/cronmesh/services/trigger/internal/firing"
	"github.com/cronmesh/cronmesh/services/trigger/internal/projection"
	"github.com/cronmesh/cronmesh/services/trigger/internal/retention"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
	"github.com/cronmesh/cronmesh/services/trigger/internal/timesync"
)

// Defaults of a trigger node.
const (
	DefaultListen     = "127.0.0.1:8082"
	DefaultSchema     = "trigger"
	DefaultPrefix     = "/cronmesh/trigger/"
	DefaultPartitions = 256
	DefaultLeaseTTL   = 2 * time.Second
)

// DefaultOutboxShards is the default of --outbox-shards: the cycle loops
// among which a node's relay splits its partitions. 4 rather than the 8
// one relay for the whole cluster needed: every node runs its own, and in
// the end-to-end benchmark at 1,000/s (two nodes) 8 loops per node left the
// dispatcher behind (p50 lateness 11.5 and 17.6 s in two runs) where 4 and
// 2 did not fall as far (2.4 and 2.3 s).
const DefaultOutboxShards = 4

// DefaultMaxBackfills is how many backfills a namespace may run at once
// unless --max-backfills or --max-backfills-namespaces say otherwise: each
// holds a connection for its batches and adds up to 1,000 dispatches a
// second, so a tenant cannot flood the dispatcher by starting many.
const DefaultMaxBackfills = 2

// DefaultLead is --lead: how long before its firing time a slot is
// committed and published, the dispatcher holding it until then
// (firing.Options.Lead). Half a second, measured against 0, 1 and 1.5 s
// with the capacity ramp (ADR 0022): the commits of a whole second's slots
// then run in the middle of the second before it, not on the whole second
// where the deliveries of the previous second's slots run (as with 1 s),
// and the dispatcher holds half a second of requests in its subscriptions
// rather than one and a half (with 1.5 s the ramp did not hold 5,000/s).
const DefaultLead = 500 * time.Millisecond

// DefaultGather is --gather (firing.Options.Gather): measured against 0
// and 500 ms with the sustained mix (ADR 0023).
const DefaultGather = 250 * time.Millisecond

// DefaultCrowdSize, DefaultCrowdFactor and DefaultCrowdLead are
// --crowd-size, --crowd-factor and --crowd-lead (firing.Options.CrowdSize,
// CrowdFactor, CrowdLead): a second of at least 1,000 slots of a node, and
// three times the node's usual second (the jobs it committed per second
// over the last 10 s), starts 2 s ahead. The sustained mix's top-of-minute
// seconds (about four usual seconds) then reach the dispatcher before
// their time, 100,000 slots due on one second over three nodes start 2 s
// ahead, and thousands of every-second crons are no crowd (ADRs 0023 and
// 0027).
const (
	DefaultCrowdSize   = 1000
	DefaultCrowdFactor = 3.0
	DefaultCrowdLead   = 2 * time.Second
)

// Config is everything a trigger node is told at start.
type Config struct {
	config.Common
	APIKeys config.StringList
	// Keys says where the managed API keys come from.
	Keys keyring.Config
	// NodeID names this node in the ring; default host-pid.
	NodeID string
	// Advertise is the API address other nodes and GetRing show; default
	// the listen address.
	Advertise  string
	Schema     string
	EtcdPrefix string
	Partitions int
	LeaseTTL   time.Duration
	// Broker names. Tests give each run its own.
	JobsExchange       string
	JobsQueue          string
	DispatchExchange   string
	DispatchQueue      string
	ExecutionsExchange string
	OutboxLanes        int
	OutboxShards       int
	// OutboxRowPerMessage: see store.Options.OneRowPerMessage (ADR 0019).
	OutboxRowPerMessage bool
	Lookahead           time.Duration
	// Lead: see firing.Options.Lead. The zero value commits at the firing
	// time; the flag defaults to DefaultLead.
	Lead time.Duration
	// Gather: see firing.Options.Gather. The zero value gathers nothing;
	// the flag defaults to DefaultGather.
	Gather time.Duration
	// CrowdSize, CrowdFactor and CrowdLead: see firing.Options. A zero
	// CrowdSize turns crowds off, a zero CrowdFactor makes every second of
	// CrowdSize slots a crowd; the flags default to DefaultCrowdSize,
	// DefaultCrowdFactor and DefaultCrowdLead.
	CrowdSize   int
	CrowdFactor float64
	CrowdLead   time.Duration
	// Commits is the number of firing transactions in flight at once.
	Commits int
	// GroupWait: see firing.Options.GroupWait.
	GroupWait time.Duration
	// LedgerRetention and TombstoneRetention: see store.Retention.
	LedgerRetention    time.Duration
	TombstoneRetention time.Duration
	// ClockOffset shifts this node's clock, for fault-injection tests only
	// (Go programs ignore libfaketime): the node must behave as on a host
	// whose clock is that far off.
	ClockOffset time.Duration
	// MaxBackfills caps the backfills each namespace runs at once across
	// the cluster (--max-backfills, --max-backfills-namespaces); 0 means
	// no cap, the zero value caps nothing.
	MaxBackfills quota.Limits
}

// Register adds the trigger's flags to fs.
func (c *Config) Register(fs *flag.FlagSet) {
	service.RegisterFlags(fs, &c.Common, DefaultListen, &c.APIKeys, &c.Keys)
	fs.StringVar(&c.NodeID, "node-id", "", "this node's name in the ring (default: hostname-pid)")
	fs.StringVar(&c.Advertise, "advertise", "", "API address shown to other nodes (default: --listen)")
	fs.StringVar(&c.Schema, "schema", DefaultSchema, "PostgreSQL schema of the trigger's tables")
	fs.StringVar(&c.EtcdPrefix, "etcd-prefix", DefaultPrefix, "etcd key prefix of the ring")
	fs.IntVar(&c.Partitions, "partitions", DefaultPartitions, "partitions of the ring (fixed for the life of a cluster)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", DefaultLeaseTTL, "etcd lease TTL: a dead node's partitions move after at most this long")
	fs.StringVar(&c.JobsExchange, "jobs-exchange", "cronmesh.jobs", "exchange of the registry's job events")
	fs.StringVar(&c.JobsQueue, "jobs-queue", "cronmesh.trigger.jobs", "the trigger's queue of job events")
	fs.StringVar(&c.DispatchExchange, "dispatch-exchange", "cronmesh.dispatch", "exchange dispatch requests are published to")
	fs.StringVar(&c.DispatchQueue, "dispatch-queue", "cronmesh.dispatch", "prefix of the per-priority quorum queues the dispatcher consumes (<prefix>.high, .normal, .low; declared by the trigger)")
	fs.StringVar(&c.ExecutionsExchange, "executions-exchange", "cronmesh.executions", "exchange of execution lifecycle events (execution.missed)")
	fs.IntVar(&c.OutboxLanes, "outbox-lanes", 64, "most lanes the outbox relay publishes a cycle in at once, one per 64 of its messages (order per job is kept)")
	fs.IntVar(&c.OutboxShards, "outbox-shards", DefaultOutboxShards, "read-publish-delete loops of the outbox relay, each publishing its share of the node's partitions")
	fs.BoolVar(&c.OutboxRowPerMessage, "outbox-row-per-message", false, "write an outbox row per message instead of one per partition and routing key of a commit: while a cluster is upgraded from a version whose relays cannot read grouped rows, and before a downgrade to one (ADR 0019)")
	fs.DurationVar(&c.Lookahead, "lookahead", 5*time.Second, "how far ahead slots are loaded into memory (at least 1s + --lead or --crowd-lead + --gather)")
	fs.DurationVar(&c.Lead, "lead", DefaultLead, "how long before its time a slot is committed and published; the dispatcher holds it until its time, and a change to a job made less than this before a slot applies from the next one (0: at its time)")
	fs.DurationVar(&c.Gather, "gather", DefaultGather, "with the slots whose commit time (--lead before their time) has come, commit those due within this much after them, so that slots spread over a second go in a few large commits; a slot is then committed up to --lead + --gather before its time (0: each at its commit time)")
	fs.IntVar(&c.CrowdSize, "crowd-size", DefaultCrowdSize, "a second holding at least this many slots of the node, and --crowd-factor times its usual second, is a crowd, committed from --crowd-lead before it (0: no crowds)")
	fs.Float64Var(&c.CrowdFactor, "crowd-factor", DefaultCrowdFactor, "how many times the node's usual second (the jobs it committed per second of firing time over the last 10s) a crowd holds at least (0: --crowd-size alone)")
	fs.DurationVar(&c.CrowdLead, "crowd-lead", DefaultCrowdLead, "how long before its second a crowd's commits start; the dispatcher holds its requests until their time")
	fs.IntVar(&c.Commits, "commits", firing.DefaultCommits, "firing transactions in flight at once (each on its own PostgreSQL connection)")
	fs.DurationVar(&c.GroupWait, "group-wait", firing.DefaultGroupWait, "how long slots due while a commit is in flight wait for it before another commit starts for them")
	fs.DurationVar(&c.LedgerRetention, "ledger-retention", 7*24*time.Hour, "how long a fired slot's ledger row (its exactly-once record, shown by ListSlots) is kept; whole days are dropped")
	fs.DurationVar(&c.ClockOffset, "clock-offset", 0, "FOR FAULT-INJECTION TESTS ONLY: shift this node's clock by this much, as on a host whose clock is wrong")
	fs.DurationVar(&c.TombstoneRetention, "tombstone-retention", 7*24*time.Hour, "how long a deleted job's tombstone is kept (an older event of the job delivered later than this could bring it back)")
	fs.IntVar(&c.MaxBackfills.Default, "max-backfills", DefaultMaxBackfills, "most backfills a namespace may run at once, across every trigger node (0: no limit); more are refused with RESOURCE_EXHAUSTED")
	fs.Var(&c.MaxBackfills.Namespaces, "max-backfills-namespaces", "per-namespace overrides of --max-backfills, comma separated, each namespace=N (0: no limit)")
}

func (c *Config) fillDefaults() {
	if c.NodeID == "" {
		host, _ := os.Hostname()
		c.NodeID = fmt.Sprintf("%s-%d", cmp.Or(host, "trigger"), os.Getpid())
	}
	c.Advertise = cmp.Or(c.Advertise, c.Listen)
	c.Schema = cmp.Or(c.Schema, DefaultSchema)
	c.EtcdPrefix = cmp.Or(c.EtcdPrefix, DefaultPrefix)
	c.Partitions = cmp.Or(c.Partitions, DefaultPartitions)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, DefaultLeaseTTL)
	c.Commits = cmp.Or(c.Commits, firing.DefaultCommits)
	c.OutboxShards = cmp.Or(c.OutboxShards, DefaultOutboxShards)
	c.LedgerRetention = cmp.Or(c.LedgerRetention, 7*24*time.Hour)
	c.TombstoneRetention = cmp.Or(c.TombstoneRetention, 7*24*time.Hour)
}

// App is a running trigger node.
type App struct {
	cfg Config
	svc *service.Service
}

// New connects to PostgreSQL (applying migrations and checking the
// partition count) and etcd, and builds every part. Nothing runs until Run.
func New(ctx context.Context, cfg Config, logger *slog.Logger) (_ *App, err error) {
	cfg.fillDefaults()
	// A job's AMQP target must never reach the trigger's topology.
	if err := targetcheck.CheckInternalNames(
		targetcheck.InternalName{Flag: "jobs-exchange", Name: cfg.JobsExchange},
		targetcheck.InternalName{Flag: "jobs-queue", Name: cfg.JobsQueue},
		targetcheck.InternalName{Flag: "dispatch-exchange", Name: cfg.DispatchExchange},
		targetcheck.InternalName{Flag: "dispatch-queue", Name: cfg.DispatchQueue, Family: true},
		targetcheck.InternalName{Flag: "executions-exchange", Name: cfg.ExecutionsExchange},
	); err != nil {
		return nil, err
	}
	if err := cfg.MaxBackfills.Validate("max-backfills"); err != nil {
		return nil, err
	}
	logger = logger.With(slog.String("node", cfg.NodeID))
	// hostClock is the host's clock (shifted in fault-injection tests);
	// nodeClock is it corrected to PostgreSQL's by timesync, and is the only
	// clock the node's parts read.
	var hostClock clock.Clock = clock.Real{}
	if cfg.ClockOffset != 0 {
		logger.Warn("this node's clock is shifted by --clock-offset (fault injection)", "offset", cfg.ClockOffset)
		hostClock = clock.NewOffset(clock.Real{}, cfg.ClockOffset)
	}
	nodeClock := clock.NewOffset(hostClock, 0)
	// The configured keys, and the managed ones polled from the registry.
	svc, err := service.New(ctx, service.Options{
		Name: "trigger", Config: cfg.Common, Logger: logger,
		Keys: &cfg.Keys, APIKeys: cfg.APIKeys,
		Database: &service.Database{
			Schema: cfg.Schema, Migrations: store.Migrations,
			// A connection for each commit in flight, relay shard and
			// projection batch, plus the load and the API. Connections
			// are opened on demand.
			MaxConns: int32(cfg.Commits + cfg.OutboxShards + projection.DefaultBatches + 4),
			// A node frozen inside a firing transaction holds share locks
			// on its partition rows, and the new owner's claim waits for
			// them: the server ends such a transaction after a second
			// (firing transactions never idle; one that did is retried),
			// so a frozen node cannot hold a takeover past the 5 s
			// promise.
			IdleInTransactionTimeout: time.Second,
		},
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			svc.Close(context.Background())
		}
	}()
	a := &App{cfg: cfg, svc: svc}
	tel, metrics := svc.Telemetry, svc.Metrics

	publisher, err := broker.NewPublisher(broker.PublisherOptions{
		Config: broker.RoutedPublisherConfig(cfg.AMQPURL, cfg.OutboxLanes),
		Logger: logger.With(slog.String("component", "publisher")),
	})
	if err != nil {
		return nil, err
	}
	svc.OnClose("publisher", func(context.Context) error { return publisher.Close() })
	refusals, err := quota.NewRefusals(tel.Metrics)
	if err != nil {
		return nil, err
	}
	var relay *outbox.Relay
	st, err := store.New(store.Options{
		Pool:               svc.Pool,
		NodeID:             cfg.NodeID,
		Partitions:         cfg.Partitions,
		DispatchExchange:   cfg.DispatchExchange,
		ExecutionsExchange: cfg.ExecutionsExchange,
		Propagator:         tel.Propagator,
		Tracer:             tel.TracerProvider.Tracer("cronmesh/trigger"),
		Notify:             func() { relay.Notify() },
		Clock:              nodeClock,
		MaxBackfills:       quota.New(store.BackfillQuota, cfg.MaxBackfills, refusals),
		OneRowPerMessage:   cfg.OutboxRowPerMessage,
	})
	if err != nil {
		return nil, err
	}
	syncer, err := timesync.New(timesync.Options{
		Reference: st, Clock: nodeClock, Local: hostClock,
		Logger: logger.With(slog.String("component", "timesync")), Metrics: metrics,
	})
	if err != nil {
		return nil, err
	}
	// Before anything reads the clock: a node whose host clock is off must
	// not fire a single slot on it.
	if _, err := syncer.Sync(ctx); err != nil {
		return nil, err
	}
	if err := st.EnsurePartitions(ctx, cfg.Partitions); err != nil {
		return nil, err
	}

	etcd, err := etcdclient.New(etcdclient.FromConfig(cfg.Common))
	if err != nil {
		return nil, err
	}
	svc.OnClose("etcd client", func(context.Context) error { _ = etcd.Close(); return nil })
	rng, err := ring.New(ring.Options{
		Client:     etcd,
		Prefix:     cfg.EtcdPrefix,
		NodeID:     cfg.NodeID,
		Address:    cfg.Advertise,
		Partitions: cfg.Partitions,
		LeaseTTL:   cfg.LeaseTTL,
		Clock:      nodeClock,
		Logger:     logger.With(slog.String("component", "ring")),
		Metrics:    metrics,
	})
	if err != nil {
		return nil, err
	}
	// Every node's relay publishes the rows of the partitions it owns, so
	// a frozen or dead node holds back only its own share, and only until
	// its partitions move; its commits are published where they were made,
	// woken by Notify.
	relay, err = outbox.NewRelay(outbox.RelayOptions{
		Pool:      svc.Pool,
		Publisher: publisher,
		Logger:    logger.With(slog.String("component", "outbox")),
		// A stop drains for up to twice this (confirms, then the
		// DELETE): a quarter of the shutdown timeout each leaves the rest
		// of the shutdown half of it, with a broker that swallows
		// confirms. What does not make it is published again.
		DrainTimeout: cfg.ShutdownTimeout / 4,
		Metrics:      metrics,
		Lanes:        cfg.OutboxLanes,
		// Several cycles in flight: one cycle waits for its confirms and its
		// DELETE, and a steady trickle of small commits would otherwise be
		// bound by that latency (measured: 3,600 messages/s with one).
		Shards:    cfg.OutboxShards,
		Ownership: rng,
		// Each fired slot's message (many share an outbox row: ADR 0019)
		// carries its execution's trace context: the publish is a span of
		// that trace.
		TracerProvider: tel.TracerProvider,
		Propagator:     tel.Propagator,
		Destination:    broker.SplitRoute,
		// The dispatch requests a lane publishes together share broker
		// messages (the dispatcher unpacks them): a burst of slots costs
		// the broker a message per batch, not per slot. A quiet system
		// publishes each commit's rows at once, so a lone slot goes alone.
		Pack: func(topic string) bool {
			exchange, _ := broker.SplitRoute(topic)
			return exchange == cfg.DispatchExchange
		},
		// Slots are due within 5 s of their time: after an outage the relay
		// must notice the broker's return within moments, not 30 s.
		Backoff:    100 * time.Millisecond,
		MaxBackoff: 2 * time.Second,
		// What Notify does not announce is found by polling: rows of
		// partitions just taken over from another node, and rows written
		// on another node (a run-now request's slot is written by the node
		// whose projection took the event, a backfill by the node the API
		// call reached). Every cycle reads all of its loop's partitions,
		// so while the node commits (and notifies) more often than once a
		// second its cycles find those rows too, and polls are spared; an
		// idle poll is one index probe per partition of the loop, and
		// three nodes polling four loops ten times a second made the
		// relay's read the most frequent statement of the sustained mix
		// (ADR 0025). Polls that find nothing space out to a second, the
		// most such a row can then wait.
		PollInterval:    100 * time.Millisecond,
		MaxPollInterval: time.Second,
		// outbox_due_to_confirm_seconds times each fired slot's confirm
		// from its firing time on the clock the engine fires and
		// measures trigger_fire_lateness_seconds by.
		Now: nodeClock.Now,
	})
	if err != nil {
		return nil, err
	}
	watch, err := store.NewChangeWatch(store.ChangeWatchOptions{
		Pool:    svc.Pool,
		Logger:  logger.With(slog.String("component", "job watch")),
		Metrics: metrics,
	})
	if err != nil {
		return nil, err
	}
	engine, err := firing.NewEngine(firing.Options{
		Store:       st,
		Ownership:   rng,
		JobChanges:  watch,
		Clock:       nodeClock,
		Logger:      logger.With(slog.String("component", "engine")),
		Tracer:      tel.TracerProvider.Tracer("cronmesh/trigger"),
		Metrics:     metrics,
		Lookahead:   cfg.Lookahead,
		Lead:        cfg.Lead,
		Gather:      cfg.Gather,
		CrowdSize:   cfg.CrowdSize,
		CrowdFactor: cfg.CrowdFactor,
		CrowdLead:   cfg.CrowdLead,
		Commits:     cfg.Commits,
		GroupWait:   cfg.GroupWait,
	})
	if err != nil {
		return nil, err
	}
	keeper, err := retention.New(retention.Options{
		Store:      st,
		Leadership: ring.Leadership{Ring: rng, Name: "retention"},
		Retention:  store.Retention{Ledger: cfg.LedgerRetention, Tombstones: cfg.TombstoneRetention},
		Logger:     logger.With(slog.String("component", "retention")),
		Metrics:    metrics,
		Clock:      nodeClock,
	})
	if err != nil {
		return nil, err
	}
	proj, err := projection.New(projection.Options{
		AMQPURL:        cfg.AMQPURL,
		Exchange:       cfg.JobsExchange,
		Queue:          cfg.JobsQueue,
		Store:          st,
		Logger:         logger.With(slog.String("component", "projection")),
		TracerProvider: tel.TracerProvider,
		Propagator:     tel.Propagator,
		Metrics:        metrics,
		Clock:          nodeClock,
	})
	if err != nil {
		return nil, err
	}

	path, handler := triggerv1connect.NewTriggerServiceHandler(api.NewHandler(st, rng, logger), svc.HandlerOptions()...)
	// A backfill is paced: the most slots at the slowest rate (1 a second)
	// run far longer than --write-timeout, and must still be answered.
	longest := time.Duration(store.MaxBackfillSlots)*time.Second + cmp.Or(cfg.Limits.WriteTimeout, server.DefaultWriteTimeout)
	handler = server.AllowLongCalls(handler, longest, triggerv1connect.TriggerServiceBackfillJobProcedure)
	svc.Server.Handle(triggerv1connect.TriggerServiceName, path, handler)

	// Shutdown order: the API stops; the engine stops firing; the relay
	// stops starting publishes and drains those in flight (their confirms
	// and the DELETE of their rows); then the ring releases the partitions
	// (revoking the lease, so other nodes take over at once): a new
	// owner's relay must not read rows this one has published and not yet
	// deleted, or it publishes them again (a rolling restart did, before
	// this order). The ring waits for the drain at most a lease TTL, the
	// longest a crashed node's partitions wait too, so that a broker that
	// stopped answering this node only cannot hold its partitions back for
	// the whole drain timeout (the relay's rows in flight may then be
	// published again). Unpublished rows stay in the outbox for the new
	// owner's relay. The projection, the job watch and the rest stop last.
	// The node is ready once it holds its partitions and the projection is
	// subscribed; the job watch does not gate it (without it, every load
	// reads whole partitions).
	svc.ThenStop(lifecycle.Part{Name: "engine", Run: engine.Run})
	svc.ThenStop(lifecycle.Part{Name: "outbox relay", Run: relay.Run, Hold: cfg.LeaseTTL})
	svc.ThenStop(lifecycle.Part{Name: "ring", Run: rng.Run, Ready: rng.Ready()})
	svc.ThenStop(
		lifecycle.Part{Name: "projection", Run: proj.Run, Ready: proj.Ready()},
		lifecycle.Part{Name: "retention", Run: keeper.Run},
		lifecycle.Part{Name: "timesync", Run: syncer.Run},
		lifecycle.Part{Name: "job watch", Run: watch.Run},
	)
	return a, nil
}

// Server is the node's API server.
func (a *App) Server() *server.Server { return a.svc.Server }

// Run declares the dispatch queues and runs the node until ctx is done or
// a part cannot run. Readiness (grpc.health.v1 SERVING) waits until the
// node holds its partitions and the projection is subscribed. Shutdown
// order: see New.
func (a *App) Run(ctx context.Context) error {
	// The dispatch queues must exist before the first dispatch request is
	// published: RabbitMQ confirms and drops a message no queue is bound for.
	declareCtx, cancelDeclare := context.WithTimeout(ctx, time.Minute)
	err := broker.DeclareQueues(declareCtx, a.cfg.AMQPURL, broker.DispatchQueues(a.cfg.DispatchExchange, a.cfg.DispatchQueue)...)
	cancelDeclare()
	if err != nil {
		a.svc.Close(context.WithoutCancel(ctx))
		return fmt.Errorf("declare the dispatch queue: %w", err)
	}
	return a.svc.Run(ctx)
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
