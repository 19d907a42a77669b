// Package postgres opens the PostgreSQL connection pools cronmesh services
// use: traced with OpenTelemetry (otelpgx), and with search_path set to the
// service's own schema so service code and migrations use unqualified table
// names. That is what lets every test run in a fresh schema of one shared
// database (see libs/testkit/pgtest) and lets services share a database without
// sharing tables.
//
// It also creates the database itself when missing (EnsureDatabase, for local
// development and the migrate step) and classifies common PostgreSQL errors.
package postgres
