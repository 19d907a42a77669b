// Package app wires a trigger node together: the etcd ring, the PostgreSQL
// store, the projection of job events, the firing engine, the outbox relay to
// RabbitMQ and the Connect server. cmd/trigger parses flags and calls it;
// the end-to-end tests run the built binary.
package app
