// Package service is the skeleton every cronmesh service's app is built
// on, so that each app holds only what is its own: the telemetry, the
// metrics registry with the service's label, the database (created when
// missing, connected, migrated, with the audit log's table), the API
// server, the API keys and the auth middleware, the audit log and the
// interceptors every API is mounted with, and the order of the close.
//
// An app builds a Service with New, builds its own parts on the Service's
// pool, metrics and telemetry, mounts its API with HandlerOptions, says
// when each of its long-running parts stops (WithServer, ThenStop) and
// what else to close (OnClose), and runs it with Run: the parts start
// together, the server reports SERVING once the parts that gate readiness
// are ready, and on shutdown the server stops first (draining the calls in
// flight), then the app's stages in order, then the keyring, then the
// connections and the telemetry exporter close together. See
// libs/lifecycle for the bounds that keep this within --shutdown-timeout
// when the dependencies are down.
package service
