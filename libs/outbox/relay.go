package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/postgres"
)

// Defaults of [RelayOptions].
const (
	DefaultBatchSize         = 1000
	DefaultLanes             = 16
	DefaultPollInterval      = 200 * time.Millisecond
	DefaultBackoff           = time.Second
	DefaultMaxBackoff        = 30 * time.Second
	DefaultLockRetryInterval = time.Second
	DefaultLockCheckInterval = 5 * time.Second
)

// DefaultDrainTimeout is RelayOptions.DrainTimeout when it is 0.
const DefaultDrainTimeout = 10 * time.Second

// RelayOptions configures [NewRelay]. Zero durations and sizes mean the
// defaults; negative ones are rejected.
type RelayOptions struct {
	// Pool reaches the database whose outbox table (resolved through the
	// pool's search_path) the relay publishes. Required. The relay also opens
	// one dedicated connection with the pool's connection config to hold the
	// advisory lock; it does not count against the pool's MaxConns. That
	// connection must be a real session: a transaction-pooling PgBouncer
	// in between would break the session-level lock.
	Pool *pgxpool.Pool
	// Publisher publishes each message with its row's routing key as the
	// Watermill topic, one message per call, and must return only after
	// the broker confirmed the message: for example a broker.Publisher
	// built from broker.TopicPublisherConfig. Required. It must be safe
	// for concurrent use; it is not closed by the relay.
	Publisher message.Publisher
	// Logger receives lock changes and errors; nil discards them.
	Logger *slog.Logger
	// Metrics, if non-nil, registers outbox_published_total (messages,
	// each of a grouped row counted), outbox_publish_errors_total,
	// outbox_reads_total (queries reading the outbox: polls and notified
	// cycles), outbox_pending (rows seen by the last poll of any shard, at most
	// BatchSize; a grouped row counts one), outbox_lag_seconds (age of the
	// oldest row seen by the last poll of any shard, 0 when none),
	// outbox_leader (1 while this relay holds the lock; always 0 with
	// Ownership, whose owner shows the partitions it owns) and
	// outbox_possible_duplicates_total (publishes with
	// [PossibleDuplicateHeader]) and the histogram
	// outbox_due_to_confirm_seconds (for messages written with a
	// [Message.DueAt] only: the broker's confirm, read on Now, minus
	// DueAt). Labels such as
	// the service name are the caller's business: wrap with
	// prometheus.WrapRegistererWith.
	Metrics prometheus.Registerer
	// BatchSize bounds the messages read per poll: rows are taken while
	// their messages (a grouped row of [WriteGrouped] counts each of its
	// own, from its [GroupHeader]) fit, and at least one row. A cycle then
	// publishes about as many messages whether the rows are grouped or
	// not, so it ends within the staleness bound of its read, which would
	// flag its late messages possible duplicates (see
	// [PossibleDuplicateHeader]). Default 1000.
	BatchSize int
	// Lanes is the most concurrent publishers: a cycle uses one lane per
	// 64 messages it read, up to Lanes. Within a cycle all the rows of one
	// aggregate go to one lane (the rows of [WriteGrouped], whose aggregate
	// is their partition's, one lane per partition). The publisher should allow at
	// least as many concurrent publishes (the channel pool size of a
	// watermill-amqp publisher). With Shards, each shard has Lanes/Shards
	// lanes (at least one). Default 16.
	Lanes int
	// PollInterval is how long a relay waits before polling again after a
	// poll that found rows; [Relay.Notify] cuts the wait short. Default
	// 200ms.
	PollInterval time.Duration
	// MaxPollInterval spaces out the polls that find nothing: each one
	// doubles the wait before the next, from PollInterval up to
	// MaxPollInterval, and a poll that finds rows brings it back to
	// PollInterval. A cycle woken by Notify neither grows nor resets it
	// (the rows it finds were announced), and restarts the wait, so a
	// relay notified more often than it polls does not poll at all: its
	// notified cycles read every partition of the shard and find what was
	// not announced (rows written in another process) too. Every idle
	// poll is a query, so a relay whose writers call Notify needs few.
	// Default (and anything below PollInterval): PollInterval, a steady
	// poll.
	MaxPollInterval time.Duration
	// LockKey is the PostgreSQL advisory lock key that elects the single
	// publishing relay. Advisory locks are per database, not per schema, so
	// the default 0 means a key derived from the current schema's name:
	// relays of different schemas in one database do not exclude each other.
	LockKey int64
	// Backoff is the first wait after a failed cycle (a publish or database
	// error); it doubles up to MaxBackoff, with jitter, and resets after a
	// successful cycle. Default 1s.
	Backoff time.Duration
	// MaxBackoff caps Backoff. Default 30s.
	MaxBackoff time.Duration
	// LockRetryInterval is how often a relay that does not hold the lock
	// tries again. Default 1s.
	LockRetryInterval time.Duration
	// LockCheckInterval is how often the leader pings its idle lock
	// connection. A closed or reset connection is noticed at once anyway;
	// the ping catches one that silently stopped answering. Default 5s.
	LockCheckInterval time.Duration
	// Shards, with Ownership, splits the owned partitions among this many
	// cycle loops (partition mod Shards), each reading, publishing and
	// deleting its partitions' rows on its own. A cycle waits for its
	// broker confirms and its DELETE before the next starts, so one loop
	// carrying many small commits (a trigger firing a steady trickle of
	// slots) is bound by that latency; shards multiply the cycles in
	// flight while each aggregate stays in one shard (its partition's), in
	// order. Lanes are divided among the shards. Without Ownership it must
	// be 0 or 1: the one lock-holding relay reads the outbox in id order
	// in one loop. Default 1.
	Shards int
	// Ownership, when set, replaces the advisory lock: instead of one relay
	// publishing the whole outbox, every relay publishes the rows of the
	// partitions it owns (the Partition of [Message]), as the trigger's
	// nodes own partitions of its hash ring. A frozen or dead relay then
	// stalls only its own partitions, until their ownership moves, rather
	// than every publish, and a relay on the node that wrote a row is the
	// one that publishes it, so [Relay.Notify] reaches it. The table needs
	// [PartitionSchema].
	Ownership Ownership
	// TracerProvider, when set, gives every message whose headers carry a
	// W3C trace context a producer span "publish <destination>" in that
	// trace, from the send to the broker's confirm, with the OpenTelemetry
	// messaging attributes; the message then carries the publish span's
	// context, so its consumer's span follows the publish. Messages
	// without a trace context get no span (a root span per untraced
	// message would be noise). Nil: no spans.
	TracerProvider trace.TracerProvider
	// Propagator reads and writes the trace context of the headers.
	// Default propagation.TraceContext.
	Propagator propagation.TextMapPropagator
	// Destination splits a row's routing key (the Watermill topic) into the
	// exchange and the AMQP routing key the publisher uses, for the span's
	// messaging.destination.name and routing key attributes. Default: the
	// topic is both the destination and the routing key.
	Destination func(topic string) (exchange, routingKey string)
	// Now is the clock that times the broker's confirms for
	// outbox_due_to_confirm_seconds. It is read once per confirmed chunk
	// (up to 64 messages of a lane, pipelined), when the publisher
	// returns, so a message confirmed early in its chunk counts as
	// confirmed with the chunk's last. Pass the clock the due times were
	// taken from (the trigger's is corrected to PostgreSQL's): the
	// histogram then measures lateness on one clock. Default time.Now.
	Now func() time.Time
	// Pack, when set, says which topics' messages may share a broker
	// message: consecutive messages of one lane's chunk (up to 64, of one
	// row or of several) bound for such a topic are published as one
	// message made by broker.Pack, which the consumer takes apart with
	// broker.Unpack. Each message keeps its message id, headers and trace
	// span. It needs a Publisher that pipelines ([InOrderPublisher]). Nil:
	// one broker message per outbox message.
	Pack func(topic string) bool
	// DrainTimeout bounds the draining when Run stops or loses the lock:
	// how long publishes already in flight may still wait for their
	// confirms, and then how long the DELETE of confirmed rows may take
	// (so a stop takes up to twice this). A row not every message of which
	// was confirmed, or whose DELETE did not make it, is published again,
	// whole, by the next relay. Default DefaultDrainTimeout; a service sets
	// it to fit its shutdown timeout.
	DrainTimeout time.Duration
}

// RowIDHeader is the message header naming the message's place in the
// outbox: the row's id, followed, for a message of a grouped row of
// [WriteGrouped], by "/" and its index in the row ("1234/5"). Every
// publish of one message carries the same value, and distinct messages
// distinct values: a consumer (or a test) can tell a message published
// twice (the relay lost its leadership or crashed between the broker's
// confirm and the row's delete) from two messages written for the same
// thing, which the message id alone cannot when it is derived from the
// content.
const RowIDHeader = "cronmesh-outbox-row"

// PossibleDuplicateHeader is set to "true" on a message the relay cannot
// rule out having been published before, like MQTT's DUP flag. A consumer
// that deduplicates by looking up what it already handled needs the
// look-up only for these (and for the broker's redeliveries); a message
// without it is a first publish. The relay sets it on every message of a
// row (a grouped row's messages share their row's fate)
//   - whose publish this relay attempted in a cycle that did not confirm
//     and delete every row it read (any row up to that cycle's highest id);
//   - created before this relay began publishing its partition (with
//     Ownership: before the first read at the partition's current epoch) or
//     its outbox (without: before the first read after it took the lock,
//     plus twice LockCheckInterval, the time a former leader may take to
//     notice it lost the lock): another relay, or this one before a
//     restart, may have published it;
//   - published more than [staleAfter] after it was read: the relay may
//     have been frozen past its ownership between the check and the send.
//
// What it cannot see is a freeze between setting the header and the send
// itself, a window of microseconds.
const PossibleDuplicateHeader = "cronmesh-possible-duplicate"

// staleAfter is how long after reading a row the relay still publishes it
// without [PossibleDuplicateHeader]. It is far above a healthy cycle and
// far below an ownership lease.
const staleAfter = time.Second

// Ownership tells a partitioned relay which partitions it may publish.
// Each partition must be owned by at most one relay at a time, and its
// epoch must change whenever it changes hands (the trigger's ring: the
// revision of the partition's owner key).
type Ownership interface {
	// Owned returns the partitions owned now, each with its epoch.
	Owned() map[int]int64
	// Holds reports whether partition p is still owned at epoch right now
	// (for a lease: its local deadline has not passed). The relay asks
	// before every chunk it publishes, so a relay that resumes from a
	// freeze does not publish next to the one that took its partitions
	// over.
	Holds(p int, epoch int64) bool
}

// Relay publishes outbox rows to the broker and deletes them once
// confirmed. Create it with [NewRelay] and call [Relay.Run].
type Relay struct {
	pool       *pgxpool.Pool
	connConfig *pgx.ConnConfig
	pub        message.Publisher
	log        *slog.Logger
	m          metrics

	batchSize  int
	lanes      int
	poll       time.Duration
	maxPoll    time.Duration
	backoff    time.Duration
	maxBackoff time.Duration
	lockRetry  time.Duration
	drain      time.Duration
	lockCheck  time.Duration
	lockKey    int64

	ownership Ownership
	tracing   *tracing
	now       func() time.Time
	pack      func(topic string) bool

	// shards holds one wake-up channel per shard.
	shards  []chan struct{}
	running atomic.Bool
}

// NewRelay validates opts, fills defaults and registers the metrics. It
// does not touch the database or the broker. It fails when Pool or
// Publisher is nil, a size or duration is negative, Shards > 1 comes
// without Ownership, or a metric cannot be registered (for example twice on one registerer).
func NewRelay(opts RelayOptions) (*Relay, error) {
	switch {
	case opts.Pool == nil:
		return nil, errors.New("outbox: RelayOptions.Pool is required")
	case opts.Publisher == nil:
		return nil, errors.New("outbox: RelayOptions.Publisher is required")
	case opts.BatchSize < 0, opts.Lanes < 0, opts.Shards < 0, opts.PollInterval < 0, opts.MaxPollInterval < 0, opts.Backoff < 0,
		opts.MaxBackoff < 0, opts.LockRetryInterval < 0, opts.LockCheckInterval < 0, opts.DrainTimeout < 0:
		return nil, errors.New("outbox: negative size or duration in RelayOptions")
	case opts.Shards > 1 && opts.Ownership == nil:
		return nil, errors.New("outbox: RelayOptions.Shards needs Ownership")
	}
	m, err := newMetrics(opts.Metrics)
	if err != nil {
		return nil, err
	}
	r := &Relay{
		pool:       opts.Pool,
		connConfig: opts.Pool.Config().ConnConfig,
		pub:        opts.Publisher,
		log:        cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		m:          m,
		batchSize:  cmp.Or(opts.BatchSize, DefaultBatchSize),
		lanes:      cmp.Or(opts.Lanes, DefaultLanes),
		poll:       cmp.Or(opts.PollInterval, DefaultPollInterval),
		maxPoll:    opts.MaxPollInterval,
		backoff:    cmp.Or(opts.Backoff, DefaultBackoff),
		maxBackoff: cmp.Or(opts.MaxBackoff, DefaultMaxBackoff),
		lockRetry:  cmp.Or(opts.LockRetryInterval, DefaultLockRetryInterval),
		drain:      cmp.Or(opts.DrainTimeout, DefaultDrainTimeout),
		lockCheck:  cmp.Or(opts.LockCheckInterval, DefaultLockCheckInterval),
		lockKey:    opts.LockKey,
		ownership:  opts.Ownership,
		tracing:    newTracing(opts),
		now:        opts.Now,
		pack:       opts.Pack,
	}
	if r.now == nil {
		r.now = time.Now
	}
	for range cmp.Or(opts.Shards, 1) {
		r.shards = append(r.shards, make(chan struct{}, 1))
	}
	r.lanes = max(r.lanes/len(r.shards), 1)
	r.maxBackoff = max(r.maxBackoff, r.backoff)
	r.maxPoll = max(r.maxPoll, r.poll)
	return r, nil
}

// Notify wakes the relay for an early poll. Call it after committing a
// transaction that wrote to the outbox. It never blocks, and calls made
// while a wake-up is already pending coalesce into that one. Notify works
// only within the process; a relay in another process finds the rows at its
// next poll.
func (r *Relay) Notify() {
	for _, wake := range r.shards {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

// Run publishes the outbox until ctx is done, then returns nil after
// draining: publishes in progress get up to DrainTimeout to be confirmed,
// no new ones start, and the confirmed rows are deleted (within
// DrainTimeout too). Errors (database or broker
// unavailable, lock lost) are logged and retried, never returned; Run
// returns an error only when it is already running on this Relay.
//
// Run first takes the advisory lock, waiting while another relay holds it
// (with Ownership there is no lock: it publishes the partitions it owns).
// As leader it repeats a cycle: read up to BatchSize rows ORDER BY id, split
// them into lanes (all the rows of an aggregate in one; one lane per 64 of
// their messages, up to Lanes), publish each lane's
// messages in order (a grouped row's one after the other; pipelined in
// chunks of 64 when the Publisher is an [InOrderPublisher], else one
// confirmed publish at a time) with the lanes running concurrently, then
// delete the rows whose every message was confirmed with one DELETE. A
// lane whose publish fails stops for the rest of the cycle, keeping only
// its confirmed prefix, so later messages of its aggregates are not
// published ahead of the failed one (they may be published twice, and so
// is the confirmed part of a row the failure cut); other lanes finish,
// confirmed rows are still deleted, and the relay backs off before the next
// cycle, which starts again from the lowest remaining id. If the lock
// connection dies, publishing stops at once (between chunks) and Run goes
// back to acquiring the lock.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("outbox: Relay.Run is already running")
	}
	defer r.running.Store(false)
	if r.ownership != nil {
		// Every relay publishes its own partitions: nothing to elect.
		r.publishShards(ctx)
		return nil
	}
	for {
		conn := r.acquire(ctx)
		if conn == nil {
			return nil
		}
		r.lead(ctx, conn)
		r.release(conn)
		if ctx.Err() != nil {
			return nil
		}
	}
}

// acquire returns a connection holding the advisory lock, or nil once ctx is
// done.
func (r *Relay) acquire(ctx context.Context) *pgx.Conn {
	var conn *pgx.Conn
	standing := false
	for {
		if conn == nil {
			c, err := pgx.ConnectConfig(ctx, r.connConfig.Copy())
			if err != nil && ctx.Err() == nil {
				r.log.Warn("outbox relay: cannot open the lock connection", "error", err)
			}
			conn = c
		}
		if conn != nil {
			ok, err := r.tryLock(ctx, conn)
			switch {
			case err != nil:
				if ctx.Err() == nil {
					r.log.Warn("outbox relay: cannot try the advisory lock", "error", err)
				}
				r.closeConn(conn)
				conn = nil
			case ok:
				r.log.Info("outbox relay: acquired the advisory lock; publishing")
				r.m.leader.Set(1)
				return conn
			case !standing:
				r.log.Info("outbox relay: another relay holds the advisory lock; standing by")
				standing = true
			}
		}
		if !sleep(ctx, r.lockRetry) {
			if conn != nil {
				r.closeConn(conn)
			}
			return nil
		}
	}
}

// tryLock takes the session-level advisory lock without waiting. A session
// lock (not a transaction lock) lives exactly as long as the connection, so
// a relay that dies or loses its connection frees it for a standby.
func (r *Relay) tryLock(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var ok bool
	var err error
	if r.lockKey != 0 {
		err = conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, r.lockKey).Scan(&ok)
	} else {
		// The same derivation in every relay, so relays of one schema agree
		// on the key without configuration.
		err = conn.QueryRow(ctx,
			`SELECT pg_try_advisory_lock(hashtextextended('cronmesh.outbox:' || coalesce(current_schema(), ''), 0))`,
		).Scan(&ok)
	}
	return ok, err
}

// lead publishes while conn holds the lock, until ctx is done or the lock
// connection fails.
func (r *Relay) lead(ctx context.Context, conn *pgx.Conn) {
	leadCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if err := r.watchLock(leadCtx, conn); err != nil {
			// Another relay may hold the lock already: stop now rather
			// than publish alongside it.
			r.log.Error("outbox relay: lock connection lost; stopping publishing to re-acquire the lock", "error", err)
			cancel(err)
		}
	}()
	r.publishShards(leadCtx)
	cancel(nil)
	<-watched
}

// watchLock returns an error as soon as conn fails and nil when ctx is
// done (postgres.Watch).
func (r *Relay) watchLock(ctx context.Context, conn *pgx.Conn) error {
	return postgres.Watch(ctx, conn, r.lockCheck, nil)
}

// release gives up the lock by closing its connection.
func (r *Relay) release(conn *pgx.Conn) {
	r.m.leader.Set(0)
	r.m.pending.Set(0)
	r.m.lag.Set(0)
	r.closeConn(conn)
}

func (r *Relay) closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// publishShards runs one publishLoop per shard until ctx is done. Every
// call is a new tenure: what the relay knew of earlier publishes is reset.
func (r *Relay) publishShards(ctx context.Context) {
	var wg sync.WaitGroup
	for shard := range r.shards {
		wg.Go(func() { r.publishLoop(ctx, shard, newDuplicates()) })
	}
	wg.Wait()
}

// duplicates is one shard loop's record of what may have been published
// before, for [PossibleDuplicateHeader]. Only its loop uses it.
type duplicates struct {
	// tenures holds, per partition (0 for a relay without Ownership, whose
	// rows all read as partition 0), the epoch it is published under and
	// the database time of the first read at that epoch that returned rows
	// of it; before that read, it has no entry.
	tenures map[int]tenure
	// suspectUpTo is the highest row id read by a cycle that did not
	// confirm and delete every row it read.
	suspectUpTo int64
}

type tenure struct {
	epoch int64
	since time.Time
}

func newDuplicates() *duplicates { return &duplicates{tenures: map[int]tenure{}} }

// mark sets possibleDuplicate on rows read at dbNow; epochs are the
// partitions asked (nil without Ownership); margin extends a tenure's start.
func (d *duplicates) mark(rows []row, epochs map[int]int64, dbNow time.Time, margin time.Duration) {
	if epochs == nil {
		epochs = map[int]int64{0: 0}
	}
	for p := range d.tenures {
		if e, ok := epochs[p]; !ok || e != d.tenures[p].epoch {
			delete(d.tenures, p) // gone or handed over: a return is a new tenure
		}
	}
	for i := range rows {
		rw := &rows[i]
		t, ok := d.tenures[rw.partition]
		if !ok {
			// The tenure starts at this read, so every row it returned,
			// created before it, is suspect.
			t = tenure{epoch: epochs[rw.partition], since: dbNow}
			d.tenures[rw.partition] = t
		}
		rw.possibleDuplicate = rw.id <= d.suspectUpTo || !rw.createdAt.After(t.since.Add(margin))
	}
}

// settle records a cycle's outcome: unless every row read was confirmed
// and deleted, any of them may have reached the broker.
func (d *duplicates) settle(rows []row, deleted bool, confirmed int) {
	if deleted && confirmed == len(rows) {
		return
	}
	for _, rw := range rows {
		d.suspectUpTo = max(d.suspectUpTo, rw.id)
	}
}

// publishLoop runs a shard's cycles until ctx is done, backing off after
// failures and, when the shard has no full batch, waiting for Notify or
// the poll interval (see MaxPollInterval).
func (r *Relay) publishLoop(ctx context.Context, shard int, dups *duplicates) {
	var backoff time.Duration
	interval := r.poll
	// polled: the cycle about to run is a poll, not woken by Notify.
	polled := true
	for ctx.Err() == nil {
		found, more, err := r.cycle(ctx, shard, dups)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			backoff = min(max(2*backoff, r.backoff), r.maxBackoff)
			// Jitter keeps replicas of a service (and services sharing a
			// broker) from retrying in lockstep after a shared outage.
			wait := backoff/2 + rand.N(backoff/2+1)
			r.log.Warn("outbox relay: cycle failed; retrying", "error", err, "retry_in", wait)
			if !sleep(ctx, wait) {
				return
			}
			continue
		}
		backoff = 0
		if more {
			continue // a full batch: more rows are probably waiting
		}
		wait := interval
		switch {
		case polled && found:
			interval, wait = r.poll, r.poll
		case polled:
			interval = min(2*interval, r.maxPoll)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-r.shards[shard]:
			polled = false
		case <-timer.C:
			polled = true
		}
		timer.Stop()
	}
}

// row is one outbox row as the relay reads it.
type row struct {
	id          int64
	aggregateID string
	routingKey  string
	messageID   string
	payload     []byte
	headers     map[string]string
	createdAt   time.Time
	partition   int // only with Ownership
	// possibleDuplicate: see PossibleDuplicateHeader. It is said of every
	// message of the row.
	possibleDuplicate bool
}

// item is one message of a lane as the relay publishes it: a row's only
// message or one of a grouped row's.
type item struct {
	row *row
	// index is the message's place in its grouped row; -1 for a row of
	// one message.
	index int
	// last: the row's last message, whose confirm completes the row.
	last bool
	storedMessage
}

// expand returns the messages of a lane's rows in order. A grouped row
// that cannot be decoded ends the list before it, with the error: the
// lane stops there as at a failed publish.
func expand(lane []row) ([]item, error) {
	items := make([]item, 0, len(lane))
	for i := range lane {
		rw := &lane[i]
		msgs, err := storedMessages(rw.messageID, rw.payload, rw.headers)
		if err != nil {
			return items, fmt.Errorf("row %d (aggregate %q, routing key %q): %w", rw.id, rw.aggregateID, rw.routingKey, err)
		}
		if _, grouped := rw.headers[GroupHeader]; !grouped {
			items = append(items, item{row: rw, index: -1, last: true, storedMessage: msgs[0]})
			continue
		}
		for j, m := range msgs {
			items = append(items, item{row: rw, index: j, last: j == len(msgs)-1, storedMessage: m})
		}
	}
	return items, nil
}

// selectSQL reads the oldest rows. now() comes along for the lag metric so
// that it is measured on the database's clock, like created_at.
//
// Rows are deleted rather than tracked with a cursor, and that is what makes
// id gaps harmless: bigserial ids are drawn at insert time but become visible
// at commit, so a transaction that commits late can add a row with a lower
// id than rows already published. A cursor ("id > last published") would
// skip it forever; here it is simply the lowest remaining id at the next
// poll. (Such a row belongs to a different aggregate than the rows that
// overtook it, as long as writers of one aggregate are serialized; see the
// package documentation.)
const selectSQL = `SELECT id, aggregate_id, routing_key, message_id, payload, headers, created_at, now()
FROM outbox ORDER BY id LIMIT $1`

// selectOwnedSQL reads up to $1 rows of the partitions in $2, at most $3
// of each, each partition's in id order (the order that matters: an
// aggregate lives in one partition), through the index of
// [PartitionSchema]: one short index range per partition, so a poll reads
// what it returns, with or without a backlog, and an idle poll is one probe
// per partition. Measured with 100,000 rows waiting, 32 partitions asked
// of 256: 1.8 ms for 1,000 rows. The alternatives read more:
// "partition = ANY($2) ORDER BY id" walks the primary key and drops the
// other partitions' rows (8-16 ms, 14,794 rows read and dropped for 1,000,
// and the planner takes that path even past a hash-shard index, so with
// the partitions shared among nodes and shards a backlog fed on itself);
// merging one range per partition in id order (UNION ALL) costs 2.7 ms of
// planning on every idle poll.
const selectOwnedSQL = `SELECT o.id, o.aggregate_id, o.routing_key, o.message_id, o.payload, o.headers, o.created_at, now(), o.partition
FROM unnest($2::int[]) AS owned(partition) CROSS JOIN LATERAL (
    SELECT id, aggregate_id, routing_key, message_id, payload, headers, created_at, partition
    FROM outbox WHERE outbox.partition = owned.partition ORDER BY id LIMIT $3) AS o
LIMIT $1`

// minPerPartition is the least a partition may contribute to a batch of an
// owned shard, so that a lone partition with a backlog (a backfill) still
// drains in large batches.
const minPerPartition = 64

// cycle publishes one batch of a shard and reports whether it found rows
// and whether the batch was full: BatchSize rows or, with Ownership, a
// partition's whole share, so that more rows are probably waiting.
func (r *Relay) cycle(ctx context.Context, shard int, dups *duplicates) (found, full bool, err error) {
	var epochs map[int]int64
	if r.ownership != nil {
		epochs = r.shardPartitions(shard)
		if len(epochs) == 0 {
			r.observe(nil, time.Time{})
			return false, false, nil
		}
	}
	r.m.reads.Inc()
	rows, full, dbNow, err := r.fetch(ctx, epochs)
	if err != nil {
		return false, false, err
	}
	readAt := time.Now()
	r.observe(rows, dbNow)
	if len(rows) == 0 {
		return false, false, nil
	}
	margin := time.Duration(0)
	if r.ownership == nil {
		margin = 2 * r.lockCheck
	}
	dups.mark(rows, epochs, dbNow, margin)
	confirmed, pubErr := r.publish(ctx, rows, epochs, readAt)
	delErr := r.delete(ctx, confirmed)
	dups.settle(rows, delErr == nil, len(confirmed))
	return true, full, errors.Join(pubErr, delErr)
}

// shardPartitions returns the owned partitions of a shard (partition mod
// Shards), with their epochs.
func (r *Relay) shardPartitions(shard int) map[int]int64 {
	owned := r.ownership.Owned()
	for p := range owned {
		if p%len(r.shards) != shard {
			delete(owned, p)
		}
	}
	return owned
}

// fetch reads the oldest rows (with Ownership, those of the shard's
// partitions in epochs) and reports whether the batch was full.
func (r *Relay) fetch(ctx context.Context, epochs map[int]int64) (_ []row, full bool, dbNow time.Time, _ error) {
	query, args := selectSQL, []any{r.batchSize}
	perPartition := 0
	if r.ownership != nil {
		// In random order, and each partition capped at its share of the
		// batch (but minPerPartition), so that under a backlog every
		// partition gets its turn: the batch is filled partition after
		// partition.
		partitions := make([]int32, 0, len(epochs))
		for p := range epochs {
			partitions = append(partitions, int32(p))
		}
		rand.Shuffle(len(partitions), func(i, j int) { partitions[i], partitions[j] = partitions[j], partitions[i] })
		perPartition = max(r.batchSize/len(partitions), minPerPartition)
		query, args = selectOwnedSQL, []any{r.batchSize, partitions, perPartition}
	}
	rs, err := r.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, false, time.Time{}, fmt.Errorf("outbox: read batch: %w", err)
	}
	defer rs.Close()
	rows := make([]row, 0, r.batchSize)
	perOwned := map[int]int{}
	messages := 0
	for rs.Next() {
		var rw row
		var at time.Time
		dest := []any{&rw.id, &rw.aggregateID, &rw.routingKey, &rw.messageID, &rw.payload, &rw.headers, &rw.createdAt, &at}
		if r.ownership != nil {
			dest = append(dest, &rw.partition)
		}
		if err := rs.Scan(dest...); err != nil {
			return nil, false, time.Time{}, fmt.Errorf("outbox: scan row: %w", err)
		}
		n := messagesOfRow(rw.headers)
		if len(rows) > 0 && messages+n > r.batchSize {
			// Left for the next poll, as rows never read: not suspect.
			return rows, true, dbNow, nil
		}
		messages += n
		dbNow = at
		rows = append(rows, rw)
		if r.ownership != nil {
			perOwned[rw.partition]++
			full = full || perOwned[rw.partition] == perPartition
		}
	}
	if err := rs.Err(); err != nil {
		return nil, false, time.Time{}, fmt.Errorf("outbox: read batch: %w", err)
	}
	return rows, full || len(rows) == r.batchSize, dbNow, nil
}

// messagesOfRow is how many messages a row holds: a grouped row's count
// from its [GroupHeader], 1 for any other row (or a count that does not
// parse, which the relay then reports when it decodes the row).
func messagesOfRow(headers map[string]string) int {
	if v, ok := headers[GroupHeader]; ok {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return 1
}

// takeDueAt removes [DueAtHeader] from headers and returns the due time
// it held: zero when there was none or it was not a decimal int64 (a row
// written by something other than [Write] or [WriteGrouped]), which costs
// the message its observation but never its publish.
func takeDueAt(headers map[string]string) time.Time {
	v, ok := headers[DueAtHeader]
	if !ok {
		return time.Time{}
	}
	delete(headers, DueAtHeader)
	ns, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

func (r *Relay) observe(rows []row, dbNow time.Time) {
	r.m.pending.Set(float64(len(rows)))
	if len(rows) == 0 {
		r.m.lag.Set(0)
		return
	}
	// created_at is the inserting transaction's start time, so the lowest id
	// is not necessarily the oldest row: take the minimum.
	oldest := rows[0].createdAt
	for _, rw := range rows[1:] {
		if rw.createdAt.Before(oldest) {
			oldest = rw.createdAt
		}
	}
	r.m.lag.Set(max(dbNow.Sub(oldest).Seconds(), 0))
}

// publish publishes rows in lanes and returns the ids of confirmed rows.
// With Ownership, epochs are the partitions' epochs when the rows were
// read.
func (r *Relay) publish(ctx context.Context, rows []row, epochs map[int]int64, readAt time.Time) ([]int64, error) {
	lanes := intoLanes(rows, r.lanes)

	// Lanes stop starting publishes as soon as ctx ends, but a publish in
	// flight then should still get its confirm, so that its row is deleted
	// rather than published again by the next leader: it runs under pubCtx,
	// which ends the drain timeout after ctx.
	pubCtx, cancelPub := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelPub()
	go func() {
		select {
		case <-ctx.Done():
			t := time.NewTimer(r.drain)
			defer t.Stop()
			select {
			case <-t.C:
				cancelPub()
			case <-pubCtx.Done():
			}
		case <-pubCtx.Done():
		}
	}()

	var (
		mu        sync.Mutex
		confirmed = make([]int64, 0, len(rows))
		errs      []error
		wg        sync.WaitGroup
	)
	for _, lane := range lanes {
		if len(lane) == 0 {
			continue
		}
		wg.Go(func() {
			ids, err := r.publishLane(ctx, pubCtx, lane, epochs, readAt)
			mu.Lock()
			defer mu.Unlock()
			confirmed = append(confirmed, ids...)
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		// One representative error: during an outage every lane fails the
		// same way, and sixteen copies would only bloat the log line.
		return confirmed, fmt.Errorf("%d of %d lanes failed, first: %w", len(errs), len(lanes), errs[0])
	}
	return confirmed, nil
}

// intoLanes splits a cycle's rows (in id order) into at most most lanes,
// each aggregate's rows into one lane, so that its messages go out in
// order. It uses one lane per chunk of the cycle's messages and fills them
// in turn, each up to an equal share, rather than spreading the rows over
// every lane: a lane packs its consecutive messages of one topic into one
// broker message per chunk, and the broker's cost is per message, nearly
// whatever it carries (ADR 0026). So a cycle of 150 dispatch requests is 3
// broker messages of about 50, published concurrently, and a backlog's
// cycles still use every lane. Each cycle divides its own rows, and a
// shard's cycles run one after the other, so order per aggregate holds
// across cycles too.
func intoLanes(rows []row, most int) [][]row {
	// Each aggregate's messages, the aggregates in the order they first
	// appear, and the cycle's messages.
	perAggregate := map[string]int{}
	var order []string
	messages := 0
	for _, rw := range rows {
		n := messagesOfRow(rw.headers)
		if _, seen := perAggregate[rw.aggregateID]; !seen {
			order = append(order, rw.aggregateID)
		}
		perAggregate[rw.aggregateID] += n
		messages += n
	}
	lanesUsed := min(max((messages+chunkSize-1)/chunkSize, 1), most)
	share := (messages + lanesUsed - 1) / lanesUsed
	// Each aggregate whole into the open lane while it holds less than its
	// share.
	laneOfAggregate := make(map[string]int, len(order))
	open, load := 0, 0
	for _, agg := range order {
		if load >= share && open < lanesUsed-1 {
			open, load = open+1, 0
		}
		laneOfAggregate[agg] = open
		load += perAggregate[agg]
	}
	lanes := make([][]row, lanesUsed)
	for _, rw := range rows {
		i := laneOfAggregate[rw.aggregateID]
		lanes[i] = append(lanes[i], rw)
	}
	return lanes
}

// InOrderPublisher is implemented by publishers that can pipeline a batch
// (broker.Publisher does): publish msgs[i] to topics[i] in order, without
// waiting for each confirm, and report how many leading messages were
// confirmed. The relay uses it when its Publisher has it, which turns a
// lane's cost from one broker round trip per message into about one per
// chunk.
type InOrderPublisher interface {
	PublishInOrder(topics []string, msgs []*message.Message) (confirmed int, err error)
}

// chunkSize bounds the messages a lane publishes per pipelined call, so
// that a relay that loses a partition (checked between chunks) stops
// within one chunk's confirms.
const chunkSize = 64

// publishLane publishes one lane's rows in id order, each grouped row's
// messages in their order, stopping at the first failure so that no
// message overtakes an earlier one of its aggregate, and before the next
// chunk once ctx is done or the ownership of one of the chunk's partitions
// is in doubt. It returns the ids of the rows every message of which was
// confirmed: a row confirmed in part is published again whole. Each
// publish runs under pubCtx. readAt is when the rows were read.
func (r *Relay) publishLane(ctx, pubCtx context.Context, lane []row, epochs map[int]int64, readAt time.Time) ([]int64, error) {
	ids := make([]int64, 0, len(lane))
	items, expandErr := expand(lane)
	batch, pipelined := r.pub.(InOrderPublisher)
	step := 1
	if pipelined {
		step = chunkSize
	}
	for start := 0; start < len(items); start += step {
		if ctx.Err() != nil {
			return ids, nil // stopping, not failing: the rest stays for later
		}
		chunk := items[start:min(start+step, len(items))]
		if !r.holds(chunk, epochs) {
			return ids, nil // another relay may own a partition by now
		}
		topics := make([]string, len(chunk))
		msgs := make([]*message.Message, len(chunk))
		stale := time.Since(readAt) > staleAfter
		for i, it := range chunk {
			topics[i] = it.row.routingKey
			msgs[i] = message.NewMessage(it.id, it.payload)
			if len(it.headers) > 0 {
				msgs[i].Metadata = it.headers
			}
			msgs[i].Metadata.Set(RowIDHeader, rowIDHeader(it.row.id, it.index))
			if it.row.possibleDuplicate || stale {
				msgs[i].Metadata.Set(PossibleDuplicateHeader, "true")
				r.m.possibleDuplicates.Inc()
			} else {
				delete(msgs[i].Metadata, PossibleDuplicateHeader) // written by a producer: not the relay's word
			}
			msgs[i].SetContext(pubCtx)
		}
		spans := r.tracing.start(topics, msgs)
		var (
			confirmed int
			err       error
		)
		if pipelined {
			confirmed, err = r.publishInOrder(batch, topics, msgs)
		} else if err = r.pub.Publish(topics[0], msgs[0]); err == nil {
			confirmed = 1
		}
		spans.end(confirmed, err)
		r.observeConfirmed(chunk[:confirmed])
		for _, it := range chunk[:confirmed] {
			if it.last {
				ids = append(ids, it.row.id)
			}
		}
		r.m.published.Add(float64(confirmed))
		if err != nil {
			if ctx.Err() != nil {
				return ids, nil
			}
			r.m.errors.Inc()
			it := chunk[confirmed]
			return ids, fmt.Errorf("outbox: publish row %d (aggregate %q, routing key %q, message %q): %w",
				it.row.id, it.row.aggregateID, it.row.routingKey, it.id, err)
		}
	}
	if expandErr != nil && ctx.Err() == nil {
		r.m.errors.Inc()
		return ids, fmt.Errorf("outbox: cannot publish %w", expandErr)
	}
	return ids, nil
}

// publishInOrder publishes a chunk's messages in order through pub, packing
// consecutive messages of a packable topic into one (RelayOptions.Pack),
// and returns how many leading messages of msgs the broker confirmed.
func (r *Relay) publishInOrder(pub InOrderPublisher, topics []string, msgs []*message.Message) (int, error) {
	if r.pack == nil {
		return pub.PublishInOrder(topics, msgs)
	}
	var (
		outTopics []string
		out       []*message.Message
		covers    []int // out[i] carries covers[i] of msgs
	)
	for start := 0; start < len(msgs); {
		end := start + 1
		if r.pack(topics[start]) {
			for end < len(msgs) && topics[end] == topics[start] {
				end++
			}
		}
		msg := msgs[start]
		if end-start > 1 {
			packed, err := broker.Pack(msgs[start:end])
			if err != nil {
				return sum(covers), err
			}
			msg = packed
		}
		outTopics, out, covers = append(outTopics, topics[start]), append(out, msg), append(covers, end-start)
		start = end
	}
	n, err := pub.PublishInOrder(outTopics, out)
	return sum(covers[:n]), err
}

func sum(xs []int) int {
	total := 0
	for _, x := range xs {
		total += x
	}
	return total
}

// observeConfirmed observes how late the broker confirmed the messages of
// confirmed that have a due time, just after it did. The clock is read
// once, and only when one of them has a due time. A confirm before the
// due time (the clock corrected backwards, or a due time in the future)
// observes 0.
func (r *Relay) observeConfirmed(confirmed []item) {
	var now time.Time
	for _, it := range confirmed {
		if it.dueAt.IsZero() {
			continue
		}
		if now.IsZero() {
			now = r.now()
		}
		r.m.dueToConfirm.Observe(max(now.Sub(it.dueAt).Seconds(), 0))
	}
}

// holds reports whether the relay still owns the partitions of every
// message of chunk at the epochs it read them under; always true without
// Ownership.
func (r *Relay) holds(chunk []item, epochs map[int]int64) bool {
	if r.ownership == nil {
		return true
	}
	checked := -1
	for _, it := range chunk {
		p := it.row.partition
		if p == checked {
			continue
		}
		if !r.ownership.Holds(p, epochs[p]) {
			return false
		}
		checked = p
	}
	return true
}

// delete removes confirmed rows. It outlives ctx (bounded by DrainTimeout):
// on shutdown, deleting what was confirmed is the draining that saves
// consumers a redelivery. If it fails, the rows are published again later.
func (r *Relay) delete(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.drain)
	defer cancel()
	if _, err := r.pool.Exec(dctx, `DELETE FROM outbox WHERE id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("outbox: delete %d published rows (they will be published again): %w", len(ids), err)
	}
	return nil
}

// sleep waits for d and reports whether it did, false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// metrics are the relay's Prometheus collectors.
type metrics struct {
	published prometheus.Counter
	errors    prometheus.Counter
	// reads counts the queries that read the outbox: polls and the
	// cycles Notify wakes.
	reads   prometheus.Counter
	pending prometheus.Gauge
	lag     prometheus.Gauge
	leader  prometheus.Gauge
	// possibleDuplicates counts publishes with PossibleDuplicateHeader.
	possibleDuplicates prometheus.Counter
	// dueToConfirm observes, for messages with a due time, their
	// confirm's lateness.
	dueToConfirm prometheus.Histogram
}

// newMetrics creates the collectors and registers them on reg unless it is
// nil. On failure nothing stays registered.
func newMetrics(reg prometheus.Registerer) (metrics, error) {
	m := metrics{
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_published_total",
			Help: "Outbox messages published and confirmed by the broker (each message of a grouped row counts).",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_publish_errors_total",
			Help: "Failed publishes of outbox messages, and grouped rows that could not be decoded (each stops its lane for the cycle).",
		}),
		reads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_reads_total",
			Help: "Reads of the outbox (polls, and cycles woken by Notify), each a query.",
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_pending",
			Help: "Outbox rows seen by the last poll (at most the batch size).",
		}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_lag_seconds",
			Help: "Age of the oldest outbox row seen by the last poll; 0 when none.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_leader",
			Help: "1 while this relay holds the outbox advisory lock and publishes.",
		}),
		possibleDuplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_possible_duplicates_total",
			Help: "Publishes marked as possibly published before (a retried cycle, a new tenure, a stale read).",
		}),
		dueToConfirm: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "outbox_due_to_confirm_seconds",
			Help: "Broker confirm time minus the message's due time, for messages written with a due time only (a message published twice counts twice).",
			// Fine around 100 ms, so that "p99 under 100 ms" (the
			// trigger's aim, nominal to broker-confirmed) is read off
			// the 0.1 bucket exactly; up to a minute for backlogs.
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .075, .1, .15, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
	}
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.published, m.errors, m.reads, m.pending, m.lag, m.leader, m.possibleDuplicates, m.dueToConfirm}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return metrics{}, fmt.Errorf("outbox: register metrics: %w", err)
		}
	}
	return m, nil
}
