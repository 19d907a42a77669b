package store

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cronmesh/cronmesh/libs/postgres"
)

// changesChannel is the SQL expression of the PostgreSQL notification
// channel of job row changes: one per schema, so that clusters sharing a
// database (and tests, each in its own schema) do not hear each other, cut
// to the 63 bytes a channel name may have.
const changesChannel = `left('trigger_jobs:' || current_schema(), 63)`

// allPartitions is the payload of a change to more partitions than a
// notification's payload can name.
const allPartitions = "*"

// maxChangePayload keeps a notification's payload under PostgreSQL's limit
// of 8,000 bytes.
const maxChangePayload = 7900

// notifyChanges tells every node's ChangeWatch, when tx commits, that job
// rows of partitions changed. PostgreSQL delivers a notification only once
// its transaction committed, so a load that starts after the watch heard it
// reads the change.
func notifyChanges(ctx context.Context, tx pgx.Tx, partitions ...[]int32) error {
	set := make(map[int32]struct{})
	for _, ps := range partitions {
		for _, p := range ps {
			set[p] = struct{}{}
		}
	}
	if len(set) == 0 {
		return nil
	}
	var b strings.Builder
	for i, p := range slices.Sorted(maps.Keys(set)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(p)))
	}
	payload := b.String()
	if len(payload) > maxChangePayload {
		payload = allPartitions
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify(`+changesChannel+`, $1)`, payload); err != nil {
		return fmt.Errorf("notify job changes: %w", err)
	}
	return nil
}

// Defaults of ChangeWatchOptions.
const (
	DefaultWatchRetry = time.Second
	DefaultWatchCheck = 10 * time.Second
)

// ChangeWatchOptions configures NewChangeWatch.
type ChangeWatchOptions struct {
	// Pool is the store's pool: the watch opens its own connection with
	// the pool's configuration (its schema), outside the pool. Required.
	Pool *pgxpool.Pool
	// Logger receives connection problems; nil discards them.
	Logger *slog.Logger
	// Metrics, if non-nil, registers trigger_job_watch_listening.
	Metrics prometheus.Registerer
	// Retry is the wait before reconnecting after the connection failed.
	// Default DefaultWatchRetry.
	Retry time.Duration
	// Check is how long the connection may be silent before it is pinged,
	// to find a server that vanished without closing it. Default
	// DefaultWatchCheck.
	Check time.Duration
}

// ChangeWatch is the engine's firing.JobChanges: it listens for the
// notifications the projection's transactions send (notifyChanges) and
// gathers the partitions they name. While it is not listening, and once
// after it starts listening again, it reports that anything may have
// changed: what was committed meanwhile was not heard. Safe for concurrent
// use.
type ChangeWatch struct {
	connConfig *pgx.ConnConfig
	log        *slog.Logger
	retry      time.Duration
	check      time.Duration
	listening  prometheus.Gauge

	mu sync.Mutex
	// live: LISTEN is in effect on a connection not known to be broken.
	live bool
	// missed: a change may have gone unheard since the last Changed.
	missed  bool
	changed map[int]struct{}
}

// NewChangeWatch returns a ChangeWatch; Run listens.
func NewChangeWatch(opts ChangeWatchOptions) (*ChangeWatch, error) {
	if opts.Pool == nil {
		return nil, fmt.Errorf("store: ChangeWatchOptions.Pool is required")
	}
	if opts.Retry < 0 || opts.Check < 0 {
		return nil, fmt.Errorf("store: negative duration in ChangeWatchOptions")
	}
	w := &ChangeWatch{
		connConfig: opts.Pool.Config().ConnConfig,
		log:        cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		retry:      cmp.Or(opts.Retry, DefaultWatchRetry),
		check:      cmp.Or(opts.Check, DefaultWatchCheck),
		listening: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trigger_job_watch_listening",
			Help: "1 while the node hears the projection's job changes; at 0 every load reads every owned partition whole.",
		}),
		changed: make(map[int]struct{}),
	}
	if opts.Metrics != nil {
		if err := opts.Metrics.Register(w.listening); err != nil {
			return nil, fmt.Errorf("store: register the change watch's metrics: %w", err)
		}
	}
	return w, nil
}

// Changed returns the partitions whose jobs changed since the last call,
// or all when the watch may have missed a change since then.
func (w *ChangeWatch) Changed() (partitions []int, all bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	all = !w.live || w.missed
	w.missed = false
	if !all {
		partitions = slices.Sorted(maps.Keys(w.changed))
	}
	clear(w.changed)
	return partitions, all
}

// Run listens until ctx is done, reconnecting after a failure; it always
// returns nil.
func (w *ChangeWatch) Run(ctx context.Context) error {
	for {
		if err := w.listen(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("job watch: not listening for job changes; every load reads whole partitions until it is back", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.retry):
		}
	}
}

// listen opens the watch's connection, listens on the schema's channel and
// gathers the notifications until ctx is done (nil) or the connection
// fails (its error).
func (w *ChangeWatch) listen(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, w.connConfig.Copy())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	var channel string
	if err := conn.QueryRow(ctx, `SELECT `+changesChannel).Scan(&channel); err != nil {
		return fmt.Errorf("name the channel: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	w.setLive(true)
	defer w.setLive(false)
	return postgres.Watch(ctx, conn, w.check, func(n *pgconn.Notification) { w.record(n.Payload) })
}

// record adds the partitions a notification names.
func (w *ChangeWatch) record(payload string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for field := range strings.SplitSeq(payload, ",") {
		p, err := strconv.Atoi(field)
		if err != nil {
			// "*" or a payload this version cannot read: anything may
			// have changed.
			w.missed = true
			continue
		}
		w.changed[p] = struct{}{}
	}
}

// setLive records whether the watch is listening. Starting to listen
// reports everything changed once: the changes committed before LISTEN
// were not heard.
func (w *ChangeWatch) setLive(live bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.live = live
	if live {
		w.missed = true
		w.listening.Set(1)
	} else {
		w.listening.Set(0)
	}
}
