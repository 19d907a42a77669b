// Package migrate applies a service's versioned SQL migrations to its own
// PostgreSQL schema.
//
// Each service embeds its migrations (files named NNNN_name.sql, e.g.
// 0001_create_jobs.sql) and calls Apply at startup. Migrations are applied in
// numeric order, each in its own transaction together with the row recording
// it, so a failing migration leaves nothing half-applied. A transaction-level
// advisory lock keyed by the schema name serializes replicas that start at
// once, so each migration runs exactly once. Applied migrations are recorded
// with a SHA-256 checksum in <schema>.schema_migrations; editing an applied
// migration is reported as an error instead of being silently ignored or
// re-run: write a new migration instead.
//
// Migration SQL uses unqualified names: Apply sets search_path to the schema
// inside each transaction, whatever the pool's own search_path.
//
// Statements that cannot run inside a transaction (CREATE INDEX
// CONCURRENTLY, ALTER TYPE ... ADD VALUE before PostgreSQL 12) are not
// supported.
package migrate
