package store

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/jobspec"
	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/libs/quota"
)

// Domain errors; the API and the projection map them.
var (
	// ErrNotFound: no live job with that id in the caller's namespace (never
	// projected, deleted, or of another namespace: the three are not told
	// apart, so a caller learns nothing about other namespaces).
	ErrNotFound = errors.New("job not found")
	// ErrPartitionCountChanged: the database was set up with another
	// partition count. P is fixed for the life of a cluster, since every job
	// row's partition derives from it.
	ErrPartitionCountChanged = errors.New("partition count differs from the one the cluster was created with")
	// ErrInvalidEvent: a job event that can never be applied (no job, no
	// valid id, an unknown kind, a schedule that does not parse). Retrying
	// cannot help: the projection acknowledges it as a poison message.
	ErrInvalidEvent = errors.New("invalid job event")
	// ErrTooManySlots: a backfill range holds more than MaxBackfillSlots
	// slots. Detected before anything is written.
	ErrTooManySlots = errors.New("too many slots in the backfill range")
	// ErrInvalidRange: a backfill range whose end is before its start.
	ErrInvalidRange = errors.New("backfill range ends before it starts")
)

// Default exchange names of Options.
const (
	DefaultDispatchExchange   = "cronmesh.dispatch"
	DefaultExecutionsExchange = "cronmesh.executions"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// outboxMigration is the version at which the shared outbox table joins the
// trigger's own migrations, and the next the outbox's hash-shard index (no
// longer read since every node's relay publishes its own partitions, and
// dropped by outboxPartitionsMigration); no file may take either.
const outboxMigration = 2

// outboxShardsDDL is the index a relay with eight hash shards once read
// through, as an applied migration holds it (its checksum must not
// change); outboxPartitionsMigration drops it.
const outboxShardsDDL = "CREATE INDEX IF NOT EXISTS outbox_shard_8 ON outbox (((hashtext(aggregate_id) & 2147483647) % 8), id);\n"

// outboxPartitionsMigration gives every outbox row the partition of its
// job, so that the node owning the partition publishes it.
const outboxPartitionsMigration = 5

// outboxGroupedMigration suits the outbox to the grouped rows Commit
// writes (outbox.GroupSchema).
const outboxGroupedMigration = 8

// Migrations returns the migrations of the trigger schema: its own SQL
// files and the outbox table.
func Migrations() ([]migrate.Migration, error) {
	dir, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	files, err := migrate.Load(dir)
	if err != nil {
		return nil, err
	}
	return append(files,
		migrate.New(outboxMigration, "outbox", outbox.Schema()),
		migrate.New(outboxMigration+1, "outbox_shards", outboxShardsDDL),
		migrate.New(outboxPartitionsMigration, "outbox_partitions",
			outbox.PartitionSchema()+"DROP INDEX IF EXISTS outbox_shard_8;\n"),
		migrate.New(outboxGroupedMigration, "outbox_grouped", outbox.GroupSchema()),
	), nil
}

// Options for New.
type Options struct {
	// Pool reaches the trigger schema (through its search_path). Required.
	Pool *pgxpool.Pool
	// Partitions is the ring's partition count P: Apply stores each job
	// under partition hash(job_id) mod P. Required (> 0); it must be the
	// count EnsurePartitions was given.
	Partitions int
	// NodeID is written as the owner of the partitions this node's commits
	// claim (GetRing shows it). Optional.
	NodeID string
	// DispatchExchange receives DispatchRequests. Default
	// DefaultDispatchExchange.
	DispatchExchange string
	// ExecutionsExchange receives execution.missed events. Default
	// DefaultExecutionsExchange.
	ExecutionsExchange string
	// Propagator writes trace context into every outbox message's headers.
	// Default propagation.TraceContext.
	Propagator propagation.TextMapPropagator
	// Tracer starts the root span of each execution a commit fires
	// ("trigger.execution", linked to the commit's span): one trace per
	// execution, which the dispatcher, history and alerting continue.
	// Default: no spans; each message then carries the caller's context.
	Tracer trace.Tracer
	// Notify is called after a commit that wrote outbox messages, to wake
	// the relay early (outbox.Relay.Notify). Optional.
	Notify func()
	// Clock is Backfill's clock: its fire times, the clamp of a range to
	// the present, and the waits that bound its rate. Default clock.Real.
	Clock clock.Clock
	// MaxBackfills caps the backfills running at once in each namespace,
	// across every node of the cluster. Nil: no cap.
	MaxBackfills *quota.Quota
	// OneRowPerMessage writes every outbox message as a row of its own
	// (outbox.Write), as versions before ADR 0019 did, instead of grouped
	// rows (outbox.WriteGrouped): for the rolling upgrade of a cluster
	// some of whose nodes run a relay that cannot read grouped rows, and
	// before a downgrade to such a version. Default false: grouped.
	OneRowPerMessage bool
}

// Store is the trigger's persistence. Safe for concurrent use.
type Store struct {
	pool         *pgxpool.Pool
	partitions   int
	nodeID       string
	dispatchEx   string
	executionsEx string
	propagator   propagation.TextMapPropagator
	tracer       trace.Tracer
	notify       func()
	clock        clock.Clock
	maxBackfills *quota.Quota
	// writeOutbox is outbox.WriteGrouped, or outbox.Write with
	// Options.OneRowPerMessage.
	writeOutbox func(ctx context.Context, tx pgx.Tx, msgs ...outbox.Message) error
	// locations caches time zones for the projection's next-fire
	// computations (see jobspec.Locations).
	locations jobspec.Locations
	// claimed is the epoch this store last wrote to each partition row
	// (Commit's claim), so that commits at that epoch only check it.
	claimMu sync.Mutex
	claimed map[int]int64
	// decoded holds the jobs DueJobs decoded (see decodedJobs).
	decoded decodedJobs
}

// New returns a Store. It fails on a missing Pool or a partition count that
// is not positive; it does not touch the database.
func New(opts Options) (*Store, error) {
	if opts.Pool == nil {
		return nil, errors.New("store: Pool is required")
	}
	if opts.Partitions <= 0 {
		return nil, fmt.Errorf("store: Partitions must be positive, got %d", opts.Partitions)
	}
	s := &Store{
		pool:         opts.Pool,
		partitions:   opts.Partitions,
		nodeID:       opts.NodeID,
		dispatchEx:   cmp.Or(opts.DispatchExchange, DefaultDispatchExchange),
		executionsEx: cmp.Or(opts.ExecutionsExchange, DefaultExecutionsExchange),
		propagator:   opts.Propagator,
		tracer:       opts.Tracer,
		notify:       opts.Notify,
		clock:        opts.Clock,
		maxBackfills: opts.MaxBackfills,
		writeOutbox:  outbox.WriteGrouped,
		claimed:      make(map[int]int64),
	}
	if opts.OneRowPerMessage {
		s.writeOutbox = outbox.Write
	}
	if s.propagator == nil {
		s.propagator = propagation.TraceContext{}
	}
	if s.notify == nil {
		s.notify = func() {}
	}
	if s.clock == nil {
		s.clock = clock.Real{}
	}
	return s, nil
}

// EnsurePartitions records the cluster's partition count on first use and
// makes sure the fencing rows 0..partitions-1 exist (new ones at epoch 0,
// no owner). It returns ErrPartitionCountChanged, writing nothing, when the
// database already holds another count. Nodes starting together may call
// it concurrently: the first insert wins and the others compare against it.
func (s *Store) EnsurePartitions(ctx context.Context, partitions int) error {
	if partitions <= 0 {
		return fmt.Errorf("store: partition count must be positive, got %d", partitions)
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO ring_meta (partitions) VALUES ($1) ON CONFLICT DO NOTHING`, partitions); err != nil {
			return fmt.Errorf("record partition count: %w", err)
		}
		var stored int
		if err := tx.QueryRow(ctx, `SELECT partitions FROM ring_meta`).Scan(&stored); err != nil {
			return fmt.Errorf("read partition count: %w", err)
		}
		if stored != partitions {
			return fmt.Errorf("%w: the database holds %d, this node was given %d", ErrPartitionCountChanged, stored, partitions)
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO partitions (partition) SELECT generate_series(0, $1 - 1)
			ON CONFLICT DO NOTHING`, partitions); err != nil {
			return fmt.Errorf("create partition rows: %w", err)
		}
		return nil
	})
}

// PartitionState is one fencing row, as GetRing shows it.
type PartitionState struct {
	Partition int
	// Epoch is the newest epoch a commit claimed (0: never fired).
	Epoch int64
	// Owner is the NodeID of the node that claimed Epoch ("" before any).
	Owner string
	// UpdateTime is when Epoch was last claimed (zero before any commit).
	UpdateTime time.Time
}

// Partitions returns every fencing row, by partition number. Empty before
// EnsurePartitions.
func (s *Store) Partitions(ctx context.Context) ([]PartitionState, error) {
	rows, err := s.pool.Query(ctx, `SELECT partition, epoch, owner, update_time FROM partitions ORDER BY partition`)
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PartitionState, error) {
		var p PartitionState
		var updated *time.Time
		if err := r.Scan(&p.Partition, &p.Epoch, &p.Owner, &updated); err != nil {
			return p, err
		}
		if updated != nil {
			p.UpdateTime = updated.UTC()
		}
		return p, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	return out, nil
}

// JobState is the trigger's view of one job.
type JobState struct {
	// Job is the definition the trigger fires, signing secret included:
	// never return it to API callers as is.
	Job       *registryv1.Job
	Partition int
	// Version is the job version the row holds.
	Version int64
	Paused  bool
	// NextFire is the nominal time of the next slot; zero when the job is
	// paused or has no slot left.
	NextFire time.Time
	// LastNominal is the newest slot a firing commit recorded (fired or
	// missed); zero before the first.
	LastNominal time.Time
	// MaxRuns is the job's limit (Job.max_runs; 0: none) and RunsFired
	// the scheduled and catch-up runs fired since the job got it.
	MaxRuns, RunsFired int64
}

// Completed says whether the job reached its max_runs: it fires no more
// slots of its schedule until the limit is raised.
func (st JobState) Completed() bool {
	return st.MaxRuns > 0 && st.RunsFired >= st.MaxRuns
}

// Job returns the trigger's state of a live job of namespace: ErrNotFound
// when it is unknown, deleted or of another namespace (or jobID is not a
// UUID).
func (s *Store) Job(ctx context.Context, namespace, jobID string) (JobState, error) {
	id, err := uuid.Parse(jobID)
	if err != nil {
		return JobState{}, ErrNotFound
	}
	var (
		st         JobState
		spec       []byte
		ns         string
		next, last *time.Time
		deleted    bool
		idText     string
	)
	err = s.pool.QueryRow(ctx, `
		SELECT job_id::text, namespace, partition, version, deleted, paused, spec, next_fire_at, last_nominal,
			max_runs, runs_fired
		FROM jobs WHERE job_id = $1`, id).
		Scan(&idText, &ns, &st.Partition, &st.Version, &deleted, &st.Paused, &spec, &next, &last,
			&st.MaxRuns, &st.RunsFired)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && (deleted || ns != namespace)) {
		return JobState{}, ErrNotFound
	}
	if err != nil {
		return JobState{}, fmt.Errorf("read job %s: %w", jobID, err)
	}
	st.Job, err = decodeSpec(spec, idText, ns, st.Version, st.Paused)
	if err != nil {
		return JobState{}, err
	}
	if next != nil {
		st.NextFire = next.UTC()
	}
	if last != nil {
		st.LastNominal = last.UTC()
	}
	return st, nil
}

// encodeSpec is the stored form of a job: the protobuf without what the
// trigger never reads (etag, update time, description) but with the signing
// secret, which the dispatcher needs.
func encodeSpec(job *registryv1.Job) ([]byte, error) {
	spec := proto.Clone(job).(*registryv1.Job)
	spec.Etag, spec.UpdateTime, spec.Description = "", nil, ""
	b, err := proto.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encode job %s: %w", job.GetId(), err)
	}
	return b, nil
}

// decodeSpec reverses encodeSpec; the columns are authoritative for the
// fields they hold.
func decodeSpec(spec []byte, id, namespace string, version int64, paused bool) (*registryv1.Job, error) {
	job := &registryv1.Job{}
	if err := proto.Unmarshal(spec, job); err != nil {
		return nil, fmt.Errorf("decode job %s: %w", id, err)
	}
	job.Id, job.Namespace, job.Version, job.Paused = id, namespace, version, paused
	return job, nil
}

// micros truncates t to PostgreSQL's precision (and UTC), so that a time
// written and read back compares equal.
func micros(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// ServerTime returns PostgreSQL's clock (clock_timestamp(), not the
// transaction's start): the reference every node's clock is kept on (see
// package timesync), since every firing commits here anyway.
func (s *Store) ServerTime(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return now, nil
}
