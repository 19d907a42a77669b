package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronmesh/cronmesh/libs/telemetry"
)

func TestNewLogger(t *testing.T) {
	t.Parallel()
	tests := []struct {
		level   string
		logged  []string // messages, of debug/info/warn/error, expected in the output
		wantErr bool
	}{
		{level: "debug", logged: []string{"d", "i", "w", "e"}},
		{level: "info", logged: []string{"i", "w", "e"}},
		{level: "", logged: []string{"i", "w", "e"}},
		{level: "WARN", logged: []string{"w", "e"}},
		{level: "error", logged: []string{"e"}},
		{level: "trace", wantErr: true},
		{level: "warning", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.level, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			logger, err := telemetry.NewLogger(&buf, tt.level, "registry")
			if tt.wantErr {
				require.ErrorContains(t, err, "unknown log level")
				return
			}
			require.NoError(t, err)
			logger.Debug("d")
			logger.Info("i")
			logger.Warn("w")
			logger.Error("e")
			var got []string
			for line := range strings.Lines(buf.String()) {
				var rec map[string]any
				require.NoError(t, json.Unmarshal([]byte(line), &rec), "not JSON: %s", line)
				require.Equal(t, "registry", rec["service"])
				got = append(got, rec["msg"].(string))
			}
			require.Equal(t, tt.logged, got)
		})
	}
}

func setup(t *testing.T) (*telemetry.Telemetry, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tel, err := telemetry.Setup(t.Context(), telemetry.Options{ServiceName: "test-svc", SpanExporter: exp})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	return tel, exp
}

func TestInjectExtractRoundTrip(t *testing.T) {
	t.Parallel()
	tel, _ := setup(t)
	ctx, span := tel.Tracer("test").Start(t.Context(), "produce")
	defer span.End()
	member, err := baggage.NewMember("tenant", "acme")
	require.NoError(t, err)
	bag, err := baggage.New(member)
	require.NoError(t, err)
	ctx = baggage.ContextWithBaggage(ctx, bag)

	md := map[string]string{"other": "kept"}
	telemetry.InjectMap(ctx, tel.Propagator, md)
	require.Contains(t, md, "traceparent")
	require.Equal(t, "kept", md["other"])

	got := telemetry.ExtractMap(context.Background(), tel.Propagator, md)
	remote := trace.SpanContextFromContext(got)
	require.True(t, remote.IsRemote())
	require.Equal(t, span.SpanContext().TraceID(), remote.TraceID())
	require.Equal(t, span.SpanContext().SpanID(), remote.SpanID())
	require.Equal(t, "acme", baggage.FromContext(got).Member("tenant").Value())
}

func TestExtractEdgeCases(t *testing.T) {
	t.Parallel()
	tel, _ := setup(t)
	tests := map[string]map[string]string{
		"nil":     nil,
		"empty":   {},
		"garbage": {"traceparent": "not-a-trace"},
	}
	for name, md := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := telemetry.ExtractMap(t.Context(), tel.Propagator, md)
			require.False(t, trace.SpanContextFromContext(ctx).IsValid())
		})
	}
	// A nil map has nowhere to go: no panic.
	telemetry.InjectMap(t.Context(), tel.Propagator, nil)
}

func TestSpansExported(t *testing.T) {
	t.Parallel()
	tel, exp := setup(t)
	ctx, parent := tel.Tracer("test").Start(t.Context(), "parent")
	_, child := tel.Tracer("test").Start(ctx, "child")
	child.End()
	parent.End()
	require.NoError(t, tel.ForceFlush(t.Context()))

	spans := exp.GetSpans()
	require.Len(t, spans, 2)
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	require.Equal(t, byName["parent"].SpanContext.SpanID(), byName["child"].Parent.SpanID())
	require.Equal(t, byName["parent"].SpanContext.TraceID(), byName["child"].SpanContext.TraceID())
	require.Contains(t, byName["parent"].Resource.Attributes(), semconv.ServiceName("test-svc"))
}

func TestSetup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    telemetry.Options
		wantErr string
	}{
		{name: "no service name", opts: telemetry.Options{}, wantErr: "ServiceName"},
		{name: "no export", opts: telemetry.Options{ServiceName: "s"}},
		// The exporter connects lazily, so an endpoint with nothing behind it
		// is fine at setup; Shutdown must still return promptly.
		{name: "otlp endpoint", opts: telemetry.Options{ServiceName: "s", OTLPEndpoint: "127.0.0.1:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tel, err := telemetry.Setup(t.Context(), tt.opts)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			// A trace started here is sampled only when it is exported; its
			// ids exist either way, for logs and outgoing traceparents.
			_, span := tel.Tracer("").Start(t.Context(), "s")
			require.True(t, span.SpanContext().IsValid())
			require.Equal(t, tt.opts.OTLPEndpoint != "", span.SpanContext().IsSampled())
			require.Equal(t, tt.opts.OTLPEndpoint != "", span.IsRecording())
			span.End()
			// A caller's sampled trace stays sampled, exported or not, so the
			// services after this one still see it sampled.
			parent := trace.ContextWithRemoteSpanContext(t.Context(), trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true,
			}))
			_, child := tel.Tracer("").Start(parent, "c")
			require.True(t, child.SpanContext().IsSampled())
			require.Equal(t, trace.TraceID{1}, child.SpanContext().TraceID())
			child.End()

			mfs, err := tel.Metrics.Gather()
			require.NoError(t, err)
			names := map[string]bool{}
			for _, mf := range mfs {
				names[mf.GetName()] = true
			}
			require.True(t, names["go_goroutines"], "Go collector registered")
			require.True(t, names["process_start_time_seconds"], "process collector registered")

			// Nothing to flush to a dead collector on shutdown: cancel fast.
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			_ = tel.Shutdown(ctx)
			_ = tel.Shutdown(ctx) // safe twice
		})
	}
}

func TestShutdownTwice(t *testing.T) {
	t.Parallel()
	tel, err := telemetry.Setup(t.Context(), telemetry.Options{ServiceName: "s", SpanExporter: tracetest.NewInMemoryExporter()})
	require.NoError(t, err)
	require.NoError(t, tel.Shutdown(t.Context()))
	require.NoError(t, tel.Shutdown(t.Context()))
}

// TestShutdownWithCollectorDown: with a span pending and the collector
// unreachable, Shutdown gives up after FlushTimeout even on a context
// without a deadline (the exporter alone would retry for a minute).
func TestShutdownWithCollectorDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	endpoint := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	tel, err := telemetry.Setup(t.Context(), telemetry.Options{ServiceName: "s", OTLPEndpoint: endpoint})
	require.NoError(t, err)
	_, span := tel.Tracer("test").Start(t.Context(), "pending")
	span.End()

	done := make(chan error, 1)
	go func() { done <- tel.Shutdown(context.Background()) }()
	select {
	case err := <-done:
		require.Error(t, err, "the span could not be exported")
	case <-time.After(telemetry.FlushTimeout + 10*time.Second):
		t.Fatal("Shutdown still waiting for the collector")
	}
}
