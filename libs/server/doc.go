// Package server is the bootstrap every cronmesh service runs, so a service's
// main.go is only wiring: build a Server, mount the generated Connect handlers
// with Handle (passing HandlerOptions to them), flip SetServing once the
// service's dependencies are ready, and Run until the context is cancelled.
//
// One listener serves HTTP/1.1 and unencrypted HTTP/2 (h2c), so the Connect,
// gRPC and gRPC-Web protocols all work without TLS inside the mesh; or, with
// Options.TLS, HTTP/2 and HTTP/1.1 over TLS (ALPN), optionally requiring
// client certificates (mutual TLS). Besides the mounted services a Server
// always serves:
//
//   - grpc.health.v1.Health (Check), reporting NOT_SERVING until SetServing(true);
//   - gRPC server reflection v1 and v1alpha listing every handled service, so
//     `grpcurl -plaintext` and `buf curl` work without proto files;
//   - /metrics (Prometheus, the Telemetry registry, including per-procedure
//     request counters and durations of the Connect services);
//   - /healthz (liveness, always 200) and /readyz (200 only while serving).
//
// Middleware added with UseMiddleware (authentication, typically) wraps only
// the mounted Connect services: probes, reflection and metrics stay open so
// orchestrators and grpcurl need no credentials. The per-key rate limit of
// Options.RateLimit (libs/ratelimit) is an interceptor of HandlerOptions, so
// it too applies only to the mounted services, once the caller is known.
//
// Every request is bounded (Limits): the mounted services' messages by
// Limits.MaxRequestBytes after decompression and their raw bodies likewise,
// health and reflection, open to anyone, by a few kilobytes; reading a
// request by ReadTimeout, answering it by WriteTimeout (AllowLongCalls
// lifts that for a procedure meant to run long), headers by MaxHeaderBytes.
// Beyond a size limit a call fails with RESOURCE_EXHAUSTED.
package server
