// Package pgtest gives each test its own throw-away PostgreSQL schema in the
// shared test database, so tests of different packages can run in parallel
// against one real server without seeing each other's rows. A test that
// crashes its database runs on a [Server] of its own instead; one that
// only needs its connections cut goes through a [Proxy].
//
// Tests never skip when PostgreSQL is missing: they fail, telling the
// developer to run `make test`, which starts it. A silently skipped database
// test is a test that never runs.
package pgtest
