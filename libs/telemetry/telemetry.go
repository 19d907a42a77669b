package telemetry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Options for Setup.
type Options struct {
	// ServiceName becomes the service.name resource attribute of every span;
	// required.
	ServiceName string
	// OTLPEndpoint is the host:port of an OTLP/gRPC collector, reached without
	// TLS. Empty means no export: spans are still created and sampled (so
	// trace ids propagate and appear in logs) but dropped when they end.
	OTLPEndpoint string
	// SpanExporter, when non-nil, receives spans instead of the OTLP exporter
	// (OTLPEndpoint is then ignored). Meant for tests, with an in-memory
	// exporter; call Telemetry.ForceFlush before asserting on it because spans
	// are batched.
	SpanExporter sdktrace.SpanExporter
	// Logger records how tracing was set up (export on or off). Nil discards.
	Logger *slog.Logger
}

// Telemetry bundles what a service needs to observe itself. No globals: it
// does NOT call otel.SetTracerProvider; it is passed explicitly.
type Telemetry struct {
	// TracerProvider is an SDK provider with a parent-based sampler: every
	// trace is sampled when spans are exported, and only traces a caller
	// sampled when they are not (see sampler).
	TracerProvider trace.TracerProvider
	// Propagator carries W3C tracecontext and baggage.
	Propagator propagation.TextMapPropagator
	// Metrics is a fresh registry holding the Go and process collectors;
	// services register their own metrics on it and libs/server serves it on
	// /metrics.
	Metrics *prometheus.Registry

	sdk          *sdktrace.TracerProvider
	shutdownOnce sync.Once
	shutdownErr  error
}

// Setup builds a Telemetry. With an OTLPEndpoint it creates an OTLP/gRPC
// exporter, which connects lazily: an unreachable collector is not an error
// here, spans are retried and eventually dropped by the exporter. ctx only
// bounds the setup itself. Callers must call Shutdown to flush spans.
func Setup(ctx context.Context, opts Options) (*Telemetry, error) {
	if opts.ServiceName == "" {
		return nil, errors.New("telemetry: ServiceName is required")
	}
	// resource.NewWithAttributes rather than resource.Default(): the default
	// one reads OTEL_* environment variables, and configuration comes only
	// from libs/config.
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(opts.ServiceName))
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	logger := cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	switch {
	case opts.SpanExporter != nil:
		tpOpts = append(tpOpts, sdktrace.WithBatcher(opts.SpanExporter))
		logger.DebugContext(ctx, "tracing to a custom span exporter")
	case opts.OTLPEndpoint != "":
		exp, err := otlptracegrpc.New(ctx,
			otlptracegrpc.WithEndpoint(opts.OTLPEndpoint),
			otlptracegrpc.WithInsecure(),
		)
		if err != nil {
			return nil, fmt.Errorf("telemetry: OTLP exporter for %s: %w", opts.OTLPEndpoint, err)
		}
		tpOpts = append(tpOpts, sdktrace.WithBatcher(exp))
		logger.InfoContext(ctx, "exporting traces over OTLP/gRPC", "endpoint", opts.OTLPEndpoint)
	default:
		logger.InfoContext(ctx, "trace export disabled (no OTLP endpoint)")
	}
	tpOpts = append(tpOpts, sdktrace.WithSampler(sampler(opts.SpanExporter != nil || opts.OTLPEndpoint != "")))
	reg := prometheus.NewRegistry()
	if err := errors.Join(
		reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
	); err != nil {
		return nil, fmt.Errorf("telemetry: register collectors: %w", err)
	}
	sdk := sdktrace.NewTracerProvider(tpOpts...)
	return &Telemetry{
		TracerProvider: sdk,
		Propagator:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		Metrics:        reg,
		sdk:            sdk,
	}, nil
}

// sampler decides which spans are recorded. With export, every trace is:
// a trace this service starts is sampled, and so is one whose caller
// sampled it. Without export nobody would read a recorded span, and
// recording one (attributes, events, the end) cost the dispatcher about a
// tenth of its CPU, so a trace this service starts is not sampled. Spans
// still get trace and span ids (logs and the traceparent of outgoing
// requests carry them, flagged not sampled), and a caller's sampled trace
// is still recorded and passed on as sampled, so a service without export
// in the middle of a traced call does not cut the trace for the services
// after it.
func sampler(export bool) sdktrace.Sampler {
	if export {
		return sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
	return sdktrace.ParentBased(sdktrace.NeverSample())
}

// MayRecord reports whether a span started in ctx may be recorded under
// the samplers Setup configures, which follow the parent: false only when
// ctx holds a valid span context that is not sampled. A hot path skips a
// child span that nobody would record (and passes ctx's own context on
// instead, the same trace), which costs less than a span that records
// nothing.
func MayRecord(ctx context.Context) bool {
	sc := trace.SpanContextFromContext(ctx)
	return !sc.IsValid() || sc.IsSampled()
}

// ForceFlush exports every span ended so far, waiting at most until ctx is
// done. Useful before a short-lived command exits or before a test asserts on
// exported spans. A Telemetry not made by Setup (a struct literal, e.g. with a
// no-op TracerProvider) has nothing to flush and returns nil.
func (t *Telemetry) ForceFlush(ctx context.Context) error {
	if t.sdk == nil {
		return nil
	}
	return t.sdk.ForceFlush(ctx)
}

// FlushTimeout bounds Shutdown's flush of pending spans. The exporter
// retries a collector that is down for a minute; a service's exit must not
// wait for that (its shutdown timeout is 15 s by default), and spans are
// worth less than a prompt exit.
const FlushTimeout = 2 * time.Second

// Shutdown flushes pending spans and stops the exporter, waiting at most
// FlushTimeout or until ctx is done, whichever comes first; the spans not
// exported by then are dropped. It is safe to call twice (and concurrently):
// later calls return the first call's result. Spans started after Shutdown
// are dropped. A Telemetry not made by Setup has nothing to shut down and
// returns nil.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.shutdownOnce.Do(func() {
		if t.sdk != nil {
			ctx, cancel := context.WithTimeout(ctx, FlushTimeout)
			defer cancel()
			t.shutdownErr = t.sdk.Shutdown(ctx)
		}
	})
	return t.shutdownErr
}

// Tracer returns a tracer named name (by convention the instrumenting
// package's import path) from the TracerProvider; "" means
// "github.com/cronmesh/cronmesh".
func (t *Telemetry) Tracer(name string) trace.Tracer {
	return t.TracerProvider.Tracer(cmp.Or(name, "github.com/cronmesh/cronmesh"))
}
