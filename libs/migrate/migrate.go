package migrate

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cronmesh/cronmesh/libs/postgres"
)

// Migration is one parsed migration file.
type Migration struct {
	// Version is the file name's numeric prefix; unique and positive.
	Version int
	// Name is the rest of the file name without ".sql".
	Name string
	// SQL is the file content, run as one multi-statement script.
	SQL string
	// Checksum is the hex SHA-256 of SQL.
	Checksum string
}

// New returns the migration with version, name and sql, for migrations that
// are not files: a shared library's DDL (outbox.Schema) included in a
// service's set.
func New(version int, name, sql string) Migration {
	sum := sha256.Sum256([]byte(sql))
	return Migration{Version: version, Name: name, SQL: sql, Checksum: hex.EncodeToString(sum[:])}
}

// migrationFile matches NNNN_name.sql; the name part is required so files say
// what they do.
func migrationFile() *regexp.Regexp {
	return regexp.MustCompile(`^([0-9]+)_([^/]+)\.sql$`)
}

// Load reads the migrations at the root of fsys (use fs.Sub for a
// subdirectory of an embed.FS), sorted by version. Files not ending in .sql
// and directories are ignored; a .sql file not named NNNN_name.sql, a version
// of 0, or two files with one version are errors, since each would otherwise
// be silently skipped or ambiguous. No migrations at all is not an error.
func Load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("migrate: read migrations: %w", err)
	}
	re := migrationFile()
	var migrations []Migration
	seen := map[int]string{}
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".sql" {
			continue
		}
		m := re.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migrate: %s: want a name like 0001_create_things.sql", e.Name())
		}
		version, err := strconv.Atoi(m[1])
		if err != nil || version <= 0 {
			return nil, fmt.Errorf("migrate: %s: version must be a positive number", e.Name())
		}
		if prev, dup := seen[version]; dup {
			return nil, fmt.Errorf("migrate: %s and %s share version %d", prev, e.Name(), version)
		}
		seen[version] = e.Name()
		content, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrate: read %s: %w", e.Name(), err)
		}
		migrations = append(migrations, New(version, m[2], string(content)))
	}
	slices.SortFunc(migrations, func(a, b Migration) int { return cmp.Compare(a.Version, b.Version) })
	return migrations, nil
}

// Apply creates schema (CREATE SCHEMA IF NOT EXISTS) and its
// schema_migrations table, then applies the migrations of fsys (see Load)
// that are not recorded there yet, in order, each in its own transaction that
// holds a transaction-level advisory lock keyed by the schema name and has
// search_path set to the schema. Concurrent Apply calls for one schema (from
// replicas starting together) therefore apply each migration once. It
// returns the versions it applied, in order: empty when up to date.
//
// An applied migration whose checksum changed is an error, detected before
// anything new is applied. Recorded versions missing from fsys (applied by a
// newer release during a rolling deploy) are ignored. When a migration fails,
// the error names it, the versions applied before it stay applied and are
// returned alongside the error.
func Apply(ctx context.Context, pool *pgxpool.Pool, schema string, fsys fs.FS) ([]int, error) {
	migrations, err := Load(fsys)
	if err != nil {
		return nil, err
	}
	return ApplyAll(ctx, pool, schema, migrations)
}

// ApplyAll is Apply for migrations already loaded (see Load and New), in any
// order; two with one version are an error.
func ApplyAll(ctx context.Context, pool *pgxpool.Pool, schema string, migrations []Migration) ([]int, error) {
	if schema == "" {
		return nil, errors.New("migrate: schema is required")
	}
	migrations = slices.Clone(migrations)
	slices.SortFunc(migrations, func(a, b Migration) int { return cmp.Compare(a.Version, b.Version) })
	for i := 1; i < len(migrations); i++ {
		if migrations[i].Version == migrations[i-1].Version {
			return nil, fmt.Errorf("migrate: %s and %s share version %d", migrations[i-1].Name, migrations[i].Name, migrations[i].Version)
		}
	}
	m := &migrator{pool: pool, schema: schema, table: pgx.Identifier{schema, "schema_migrations"}.Sanitize()}
	if err := m.bootstrap(ctx); err != nil {
		return nil, err
	}
	applied, err := m.appliedChecksums(ctx, pool)
	if err != nil {
		return nil, err
	}
	// Check every applied migration first: an edited one means the database
	// and the code disagree, and applying more on top would compound it.
	for _, mig := range migrations {
		if err := verify(mig, applied); err != nil {
			return nil, err
		}
	}
	var done []int
	for _, mig := range migrations {
		if _, ok := applied[mig.Version]; ok {
			continue
		}
		ran, err := m.applyOne(ctx, mig)
		if err != nil {
			return done, err
		}
		if ran {
			done = append(done, mig.Version)
		}
	}
	return done, nil
}

func verify(mig Migration, applied map[int]string) error {
	if sum, ok := applied[mig.Version]; ok && sum != mig.Checksum {
		return fmt.Errorf("migrate: migration %04d_%s was changed after being applied (checksum %s, applied %s); add a new migration instead",
			mig.Version, mig.Name, mig.Checksum, sum)
	}
	return nil
}

type migrator struct {
	pool   *pgxpool.Pool
	schema string
	table  string // quoted <schema>.schema_migrations
}

// lockKey derives the advisory lock key from the schema name. Only callers of
// this package use it, so a 64-bit FNV hash makes accidental clashes with
// other advisory locks practically impossible.
func (m *migrator) lockKey() int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("cronmesh/migrate:" + m.schema))
	return int64(h.Sum64())
}

// begin starts a transaction holding the schema's advisory lock with
// search_path set to the schema.
func (m *migrator) begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := m.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: begin: %w", err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", m.lockKey()); err != nil {
		_ = tx.Rollback(ctx)
		return nil, fmt.Errorf("migrate: lock schema %s: %w", m.schema, err)
	}
	// SET LOCAL takes no parameters; set_config(..., true) is its
	// parameterised form.
	if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", postgres.SearchPath(m.schema)); err != nil {
		_ = tx.Rollback(ctx)
		return nil, fmt.Errorf("migrate: set search_path: %w", err)
	}
	return tx, nil
}

// bootstrap creates the schema and the bookkeeping table under the lock:
// concurrent CREATE ... IF NOT EXISTS can otherwise fail with a
// unique_violation in the catalog.
func (m *migrator) bootstrap(ctx context.Context) error {
	tx, err := m.begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{m.schema}.Sanitize()); err != nil {
		return fmt.Errorf("migrate: create schema %s: %w", m.schema, err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+m.table+` (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		checksum   text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("migrate: create %s: %w", m.table, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate: commit bootstrap of %s: %w", m.schema, err)
	}
	return nil
}

func (m *migrator) appliedChecksums(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
},
) (map[int]string, error) {
	rows, err := q.Query(ctx, "SELECT version, checksum FROM "+m.table)
	if err != nil {
		return nil, fmt.Errorf("migrate: read %s: %w", m.table, err)
	}
	applied := map[int]string{}
	var (
		version  int
		checksum string
	)
	_, err = pgx.ForEachRow(rows, []any{&version, &checksum}, func() error {
		applied[version] = checksum
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migrate: read %s: %w", m.table, err)
	}
	return applied, nil
}

// applyOne applies mig unless, once the lock is held, another replica turns
// out to have applied it meanwhile; it reports whether it ran mig.
func (m *migrator) applyOne(ctx context.Context, mig Migration) (bool, error) {
	tx, err := m.begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	applied, err := m.appliedChecksums(ctx, tx)
	if err != nil {
		return false, err
	}
	if _, ok := applied[mig.Version]; ok {
		return false, verify(mig, applied)
	}
	// No arguments: pgx sends the script over the simple protocol, which
	// allows several statements.
	if _, err := tx.Exec(ctx, mig.SQL); err != nil {
		return false, fmt.Errorf("migrate: apply %04d_%s to schema %s: %w", mig.Version, mig.Name, m.schema, err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+m.table+" (version, name, checksum) VALUES ($1, $2, $3)",
		mig.Version, mig.Name, mig.Checksum); err != nil {
		return false, fmt.Errorf("migrate: record %04d_%s: %w", mig.Version, mig.Name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("migrate: commit %04d_%s: %w", mig.Version, mig.Name, err)
	}
	return true, nil
}
