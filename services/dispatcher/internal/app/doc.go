// Package app wires a dispatcher together: the PostgreSQL store, the
// delivery pipeline (consuming the dispatch queues, delivering through the
// HTTP/AMQP client, scheduling retries in the delay tiers, dead-lettering,
// publishing lifecycle events), the dead-letter drainer and the Connect
// server of the DispatchService. cmd/dispatcher parses flags and calls it.
package app
