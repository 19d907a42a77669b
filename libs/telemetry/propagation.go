package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
)

// InjectMap writes the trace context of ctx (and its baggage, depending on
// prop) into m, for example the metadata of an outgoing message. A nil m is
// left alone, since there is nowhere to write; existing keys other than the
// propagator's are kept.
func InjectMap(ctx context.Context, prop propagation.TextMapPropagator, m map[string]string) {
	if m == nil {
		return
	}
	prop.Inject(ctx, propagation.MapCarrier(m))
}

// ExtractMap returns ctx carrying the remote trace context found in m, for
// example the metadata of an incoming message, so spans started from it join
// the producer's trace. With a nil or empty m, or one without valid trace
// headers, ctx is returned with no remote span.
func ExtractMap(ctx context.Context, prop propagation.TextMapPropagator, m map[string]string) context.Context {
	return prop.Extract(ctx, propagation.MapCarrier(m))
}
