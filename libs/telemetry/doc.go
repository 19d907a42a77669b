// Package telemetry sets up what a cronmesh service needs to observe itself:
// an OpenTelemetry tracer provider (exporting over OTLP/gRPC when an endpoint
// is configured), the W3C trace-context propagator, a Prometheus registry, and
// a JSON slog logger.
//
// Nothing here is global: Setup never calls otel.SetTracerProvider or
// otel.SetTextMapPropagator and metrics go to a fresh registry rather than
// prometheus.DefaultRegisterer. The returned Telemetry is passed explicitly to
// whatever needs it (libs/server, libs/postgres, message producers and
// consumers), which keeps tests isolated and lets several services share one
// process.
package telemetry
