// Package proxytest puts a controllable TCP hop between a client and a
// server, to simulate an outage of a dependency (RabbitMQ, PostgreSQL, a
// collector) from one client's point of view without disturbing the other
// tests that share the server. libs/testkit/amqptest and libs/testkit/pgtest wrap it with
// the URLs of their servers.
package proxytest
