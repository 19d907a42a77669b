// Package app wires the registry together: configuration, telemetry, the
// PostgreSQL store and its migrations, the outbox relay to RabbitMQ and the
// Connect server. cmd/registry only parses flags and calls it; tests build the
// same App against a throwaway schema and exchange.
package app
