// Package lifecycle is the one lifecycle of every long-running part of a
// cronmesh service (a consumer, a relay, a loop, the API server) and the
// group that runs the parts of one service, in the spirit of river's
// rivershared/startstop.
//
// A part has one shape: Run(ctx) works until ctx is done, finishes what it
// has in hand and returns; it returns an error only when it cannot run at
// all (a configuration its dependency refuses, a second call), never for
// trouble with a dependency, which it retries. A part that can say when it
// is able to do its work (subscribed, holding its partitions, listening)
// has Ready() <-chan struct{} as well, closed once then.
//
// A Group starts every part, reports the service ready once the parts that
// gate readiness are, and on shutdown stops them in stages, in the order the
// stages were added, each part within a bound, so that a part stuck on a
// dependency that stopped answering cannot hold the shutdown past the
// service's --shutdown-timeout; then it closes the resources the parts used
// (connections, the telemetry exporter), all at once, since each of those
// closes may wait for a dependency that is down and their order does not
// matter.
package lifecycle
