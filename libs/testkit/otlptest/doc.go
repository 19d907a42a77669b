// Package otlptest is an OTLP/gRPC trace receiver for tests: it listens on a
// free loopback port, accepts what OpenTelemetry exporters send to a
// collector's TraceService, keeps every span in memory and answers queries
// (the spans of a trace, of a service, by name), so an end-to-end test can
// assert on the traces that real service processes export.
//
// It stands in for a collector or Jaeger, which cannot run in the tests: it
// implements only the unary Export of opentelemetry.proto.collector.trace.v1
// over plaintext gRPC, stores spans flattened with their resource's
// service.name, and never drops any (tests are small).
package otlptest
