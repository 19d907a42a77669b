package store

import (
	"cmp"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cronmesh/cronmesh/libs/daypart"
	"github.com/cronmesh/cronmesh/libs/migrate"
)

// Domain errors; the API maps them to Connect codes.
var (
	// ErrNotFound: no execution with that id in the caller's namespace.
	ErrNotFound = errors.New("execution not found")
	// ErrBadCursor: a page token that this store did not issue, or issued
	// for other filters.
	ErrBadCursor = errors.New("page token is not valid for this request")
)

// Defaults of Options.
const (
	// DefaultRetention is how long executions are kept (by nominal time).
	DefaultRetention = 30 * 24 * time.Hour
	// DefaultAhead is how many days of partitions exist beyond today, so a
	// write never waits for a partition to be created.
	DefaultAhead = 3
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the migrations of the history schema.
func Migrations() ([]migrate.Migration, error) {
	dir, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	return migrate.Load(dir)
}

// Options for New.
type Options struct {
	// Pool is connected with the history schema first on its search_path.
	// Required.
	Pool *pgxpool.Pool
	// Schema is the pool's schema, for the partition catalogue queries.
	// Required.
	Schema string
	// Retention: executions whose nominal time is older are dropped, a
	// whole day's partition at a time, and events about them are ignored.
	// Default DefaultRetention.
	Retention time.Duration
	// Ahead is the number of days after today whose partitions Maintain
	// creates. Default DefaultAhead.
	Ahead int
}

// Store writes lifecycle events into the history and reads it back. Safe for
// concurrent use.
type Store struct {
	pool      *pgxpool.Pool
	schema    string
	retention time.Duration
	ahead     int

	mu sync.Mutex
	// days holds the days (UTC midnight) whose partitions are known to
	// exist, so a batch creates a partition at most once per process.
	days map[time.Time]bool
}

// New validates opts and fills the defaults.
func New(opts Options) (*Store, error) {
	switch {
	case opts.Pool == nil:
		return nil, errors.New("store: Pool is required")
	case opts.Schema == "":
		return nil, errors.New("store: Schema is required")
	case opts.Retention < 0 || opts.Ahead < 0:
		return nil, errors.New("store: Retention and Ahead must not be negative")
	case opts.Retention > 0 && opts.Retention < 24*time.Hour:
		return nil, fmt.Errorf("store: Retention %v is shorter than one day, the granularity of partitions", opts.Retention)
	}
	return &Store{
		pool:      opts.Pool,
		schema:    opts.Schema,
		retention: cmp.Or(opts.Retention, DefaultRetention),
		ahead:     cmp.Or(opts.Ahead, DefaultAhead),
		days:      map[time.Time]bool{},
	}, nil
}

// Retention is the store's retention.
func (s *Store) Retention() time.Duration { return s.retention }

// day is the UTC day of t, as the partitions are cut.
func day(t time.Time) time.Time { return daypart.Day(t) }

// Cutoff is the oldest nominal time kept at now: the start of the oldest
// day whose partition retention keeps. A day is dropped only once all of it
// is older than the retention.
func (s *Store) Cutoff(now time.Time) time.Time {
	return day(now.Add(-s.retention))
}
