// Package amqptest provides helpers for tests that run against the real
// RabbitMQ of the development environment (amqp://guest:guest@127.0.0.1:5672/,
// or $CRONMESH_TEST_AMQP_URL).
//
// Every helper fails the test, never skips it, when RabbitMQ is unreachable:
// a silently skipped broker test is a test that does not exist. `make test`
// starts the services first.
//
// Tests isolate themselves through unique names ([UniqueName]) and every
// helper removes what it declared in t.Cleanup, so tests can run in parallel
// against one shared broker. [Proxy] puts a controllable TCP hop between a
// client and the broker to simulate outages without touching the broker;
// a test that restarts the broker itself runs on a [Server] of its own.
package amqptest
