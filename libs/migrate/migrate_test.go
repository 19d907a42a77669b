package migrate_test

import (
	"context"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
)

func file(sql string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(sql)} }

// base has versions 2 and 10 so numeric and lexical order differ, and 10
// depends on 2 having run first.
func base() fstest.MapFS {
	return fstest.MapFS{
		"1_create_jobs.sql": file(`CREATE TABLE jobs (id int PRIMARY KEY, name text NOT NULL);`),
		"2_seed.sql":        file(`INSERT INTO jobs VALUES (1, 'a'); INSERT INTO jobs VALUES (2, 'b');`),
		"10_add_column.sql": file(`ALTER TABLE jobs ADD COLUMN paused boolean NOT NULL DEFAULT false; UPDATE jobs SET paused = true WHERE id = 2;`),
		"README.md":         file("not a migration"),
		"sub/9_ignored.sql": file("this is in a subdirectory: ignored"),
	}
}

type record struct {
	Version  int
	Name     string
	Checksum string
}

func records(t *testing.T, pool *pgxpool.Pool, schema string) []record {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT version, name, checksum FROM "`+schema+`".schema_migrations ORDER BY version`)
	require.NoError(t, err)
	var got []record
	for rows.Next() {
		var r record
		require.NoError(t, rows.Scan(&r.Version, &r.Name, &r.Checksum))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	return got
}

func tableExists(t *testing.T, pool *pgxpool.Pool, schema, table string) bool {
	t.Helper()
	var exists bool
	require.NoError(t, pool.QueryRow(t.Context(),
		"SELECT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = $2)",
		schema, table).Scan(&exists))
	return exists
}

// otherSchema returns a schema name that does not exist yet, dropped at
// cleanup, to show Apply creates it and ignores the pool's search_path.
func otherSchema(t *testing.T, schema string) string {
	t.Helper()
	other := schema + "_other"
	t.Cleanup(func() { require.NoError(t, pgtest.Drop(context.Background(), other)) })
	return other
}

func TestApply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// target picks the schema to migrate given the pool's own schema.
		target func(t *testing.T, poolSchema string) string
	}{
		{name: "pool's own schema", target: func(_ *testing.T, s string) string { return s }},
		{name: "another schema, created", target: otherSchema},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool, poolSchema := pgtest.New(t)
			schema := tt.target(t, poolSchema)
			migrations := base()

			applied, err := migrate.Apply(t.Context(), pool, schema, migrations)
			require.NoError(t, err)
			require.Equal(t, []int{1, 2, 10}, applied)

			var paused []bool
			rows, err := pool.Query(t.Context(), `SELECT paused FROM "`+schema+`".jobs ORDER BY id`)
			require.NoError(t, err)
			for rows.Next() {
				var p bool
				require.NoError(t, rows.Scan(&p))
				paused = append(paused, p)
			}
			require.NoError(t, rows.Err())
			require.Equal(t, []bool{false, true}, paused)

			loaded, err := migrate.Load(migrations)
			require.NoError(t, err)
			var want []record
			for _, m := range loaded {
				want = append(want, record{m.Version, m.Name, m.Checksum})
			}
			require.Equal(t, []record{
				{1, "create_jobs", want[0].Checksum},
				{2, "seed", want[1].Checksum},
				{10, "add_column", want[2].Checksum},
			}, want)
			require.Len(t, want[0].Checksum, 64)
			require.Equal(t, want, records(t, pool, schema))

			// Idempotent: nothing to do the second time.
			applied, err = migrate.Apply(t.Context(), pool, schema, migrations)
			require.NoError(t, err)
			require.Empty(t, applied)

			// A new migration is applied alone.
			migrations["11_more.sql"] = file(`CREATE TABLE more (id int);`)
			applied, err = migrate.Apply(t.Context(), pool, schema, migrations)
			require.NoError(t, err)
			require.Equal(t, []int{11}, applied)
			require.True(t, tableExists(t, pool, schema, "more"))

			if schema != poolSchema {
				require.False(t, tableExists(t, pool, poolSchema, "jobs"), "nothing leaks into the pool's schema")
			}
		})
	}
}

func TestApplyConcurrent(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.New(t)
	// Not idempotent on purpose: running any of these twice fails.
	migrations := fstest.MapFS{
		"1_create.sql": file(`CREATE TABLE runs (version int PRIMARY KEY);`),
		"2_a.sql":      file(`INSERT INTO runs VALUES (2);`),
		"3_b.sql":      file(`INSERT INTO runs VALUES (3);`),
		"4_c.sql":      file(`CREATE TABLE c (id int); INSERT INTO runs VALUES (4);`),
	}
	const replicas = 4
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total []int
	)
	start := make(chan struct{})
	for range replicas {
		wg.Go(func() {
			<-start
			applied, err := migrate.Apply(t.Context(), pool, schema, migrations)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			total = append(total, applied...)
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	require.ElementsMatch(t, []int{1, 2, 3, 4}, total, "each migration applied by exactly one replica")
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM runs").Scan(&n))
	require.Equal(t, 3, n)
	require.Len(t, records(t, pool, schema), 4)
}

func TestApplyConcurrentFreshSchema(t *testing.T) {
	t.Parallel()
	// Replicas racing on a schema that does not exist yet: CREATE SCHEMA IF
	// NOT EXISTS alone would race in the catalog.
	pool, poolSchema := pgtest.New(t)
	schema := otherSchema(t, poolSchema)
	migrations := fstest.MapFS{"1_create.sql": file(`CREATE TABLE x (id int);`)}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := migrate.Apply(t.Context(), pool, schema, migrations)
			errs <- err
		}()
	}
	for range 4 {
		require.NoError(t, <-errs)
	}
	require.Len(t, records(t, pool, schema), 1)
}

func TestApplyChecksumChanged(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.New(t)
	migrations := base()
	_, err := migrate.Apply(t.Context(), pool, schema, migrations)
	require.NoError(t, err)

	migrations["2_seed.sql"] = file(`INSERT INTO jobs VALUES (3, 'c');`)
	migrations["20_new.sql"] = file(`CREATE TABLE newer (id int);`)
	applied, err := migrate.Apply(t.Context(), pool, schema, migrations)
	require.ErrorContains(t, err, "0002_seed was changed")
	require.Empty(t, applied)
	require.False(t, tableExists(t, pool, schema, "newer"), "nothing applied after a checksum mismatch")
	require.Len(t, records(t, pool, schema), 3)
}

func TestApplyFailureRollsBack(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.New(t)
	migrations := fstest.MapFS{
		"1_ok.sql":     file(`CREATE TABLE ok (id int);`),
		"2_broken.sql": file(`CREATE TABLE half (id int); SELECT no_such_function();`),
		"3_later.sql":  file(`CREATE TABLE later (id int);`),
	}
	applied, err := migrate.Apply(t.Context(), pool, schema, migrations)
	require.ErrorContains(t, err, "0002_broken")
	require.Equal(t, []int{1}, applied)
	require.True(t, tableExists(t, pool, schema, "ok"))
	require.False(t, tableExists(t, pool, schema, "half"), "the failed migration is rolled back whole")
	require.False(t, tableExists(t, pool, schema, "later"))
	require.Len(t, records(t, pool, schema), 1)

	// Fixing the migration lets the next run continue where it stopped.
	migrations["2_broken.sql"] = file(`CREATE TABLE half (id int);`)
	applied, err = migrate.Apply(t.Context(), pool, schema, migrations)
	require.NoError(t, err)
	require.Equal(t, []int{2, 3}, applied)
}

func TestApplyEmptyAndUnknownVersions(t *testing.T) {
	t.Parallel()
	pool, poolSchema := pgtest.New(t)
	schema := otherSchema(t, poolSchema)
	applied, err := migrate.Apply(t.Context(), pool, schema, fstest.MapFS{})
	require.NoError(t, err)
	require.Empty(t, applied)
	require.Empty(t, records(t, pool, schema), "schema and table exist, no rows")

	// A recorded version the code does not know (a newer release applied it)
	// is tolerated.
	_, err = migrate.Apply(t.Context(), pool, schema, base())
	require.NoError(t, err)
	older := base()
	delete(older, "10_add_column.sql")
	applied, err = migrate.Apply(t.Context(), pool, schema, older)
	require.NoError(t, err)
	require.Empty(t, applied)
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		fs      fstest.MapFS
		wantErr string
	}{
		{name: "no name part", fs: fstest.MapFS{"0001.sql": file("")}, wantErr: "0001.sql"},
		{name: "no number", fs: fstest.MapFS{"create.sql": file("")}, wantErr: "create.sql"},
		{name: "version zero", fs: fstest.MapFS{"0_x.sql": file("")}, wantErr: "positive"},
		{name: "duplicate version", fs: fstest.MapFS{"1_a.sql": file(""), "0001_b.sql": file("")}, wantErr: "share version 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := migrate.Load(tt.fs)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestApplyRequiresSchema(t *testing.T) {
	t.Parallel()
	_, err := migrate.Apply(t.Context(), nil, "", base())
	require.ErrorContains(t, err, "schema is required")
}
