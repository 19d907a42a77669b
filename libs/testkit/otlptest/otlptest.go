package otlptest

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Span is one received span, flattened: ids as lower-case hex (the form W3C
// traceparent and the history API use), attributes as Go values (string,
// bool, int64, float64, []byte, or []any for arrays; maps are rendered with
// fmt), and the service.name of the resource that sent it.
type Span struct {
	Service      string
	Scope        string
	Name         string
	Kind         tracepb.Span_SpanKind
	TraceID      string
	SpanID       string
	ParentSpanID string // "" for a root span
	Start, End   time.Time
	Attributes   map[string]any
	Resource     map[string]any
	Links        []Link
	StatusCode   tracepb.Status_StatusCode
	StatusMsg    string
	Events       []string // event names, in order
}

// Link is a span link.
type Link struct {
	TraceID, SpanID string
}

// Attr returns the attribute key as a string (fmt's %v of the value), and
// whether the span has it.
func (s Span) Attr(key string) (string, bool) {
	v, ok := s.Attributes[key]
	if !ok {
		return "", false
	}
	return fmt.Sprint(v), true
}

// String is a one-line summary: service, name, kind, ids and attributes in
// key order; meant for failure messages.
func (s Span) String() string {
	keys := make([]string, 0, len(s.Attributes))
	for k := range s.Attributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q %s span=%s parent=%s {", s.Service, s.Name, kindName(s.Kind), s.SpanID, cmpOr(s.ParentSpanID, "-"))
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%v", k, s.Attributes[k])
	}
	b.WriteString("}")
	return b.String()
}

func kindName(k tracepb.Span_SpanKind) string {
	return strings.ToLower(strings.TrimPrefix(k.String(), "SPAN_KIND_"))
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Receiver is a running OTLP/gRPC trace receiver. Safe for concurrent use.
type Receiver struct {
	collectortrace.UnimplementedTraceServiceServer

	lis    net.Listener
	server *grpc.Server
	done   chan struct{}

	mu      sync.Mutex
	spans   []Span
	changed chan struct{} // closed and replaced on every Export
}

// Start listens on a free port of 127.0.0.1 and serves until Close.
func Start() (*Receiver, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("otlptest: listen: %w", err)
	}
	r := &Receiver{lis: lis, server: grpc.NewServer(), done: make(chan struct{}), changed: make(chan struct{})}
	collectortrace.RegisterTraceServiceServer(r.server, r)
	go func() {
		defer close(r.done)
		_ = r.server.Serve(lis)
	}()
	return r, nil
}

// New starts a Receiver for t and closes it at t's cleanup.
func New(t testing.TB) *Receiver {
	t.Helper()
	r, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// Endpoint is the receiver's host:port, the form exporters (and the
// services' --otlp-endpoint) take.
func (r *Receiver) Endpoint() string { return r.lis.Addr().String() }

// Close stops the server; exports arriving later fail (the exporters retry
// and then drop them). Safe to call twice.
func (r *Receiver) Close() {
	r.server.Stop()
	<-r.done
}

// Export implements the collector's TraceService: it stores every span of
// req and accepts all of them.
func (r *Receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		service, _ := res["service.name"].(string)
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				got = append(got, flatten(sp, service, ss.GetScope().GetName(), res))
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func flatten(sp *tracepb.Span, service, scope string, res map[string]any) Span {
	s := Span{
		Service:    service,
		Scope:      scope,
		Name:       sp.GetName(),
		Kind:       sp.GetKind(),
		TraceID:    hex.EncodeToString(sp.GetTraceId()),
		SpanID:     hex.EncodeToString(sp.GetSpanId()),
		Start:      time.Unix(0, int64(sp.GetStartTimeUnixNano())),
		End:        time.Unix(0, int64(sp.GetEndTimeUnixNano())),
		Attributes: attrMap(sp.GetAttributes()),
		Resource:   res,
		StatusCode: sp.GetStatus().GetCode(),
		StatusMsg:  sp.GetStatus().GetMessage(),
	}
	if p := sp.GetParentSpanId(); len(p) > 0 {
		s.ParentSpanID = hex.EncodeToString(p)
	}
	for _, l := range sp.GetLinks() {
		s.Links = append(s.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
	}
	for _, e := range sp.GetEvents() {
		s.Events = append(s.Events, e.GetName())
	}
	return s
}

func attrMap(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_BytesValue:
		return x.BytesValue
	case *commonpb.AnyValue_ArrayValue:
		out := make([]any, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, value(e))
		}
		return out
	case *commonpb.AnyValue_KvlistValue:
		return fmt.Sprint(attrMap(x.KvlistValue.GetValues()))
	default:
		return nil
	}
}

// Spans returns every span received so far, in arrival order.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// Select returns the spans received so far for which keep is true, in
// arrival order.
func (r *Receiver) Select(keep func(Span) bool) []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Span
	for _, s := range r.spans {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// Trace returns the spans of the trace traceID (32 lower-case hex digits),
// ordered by start time.
func (r *Receiver) Trace(traceID string) []Span {
	out := r.Select(func(s Span) bool { return s.TraceID == traceID })
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// Service returns the spans whose resource's service.name is service.
func (r *Receiver) Service(service string) []Span {
	return r.Select(func(s Span) bool { return s.Service == service })
}

// Named returns the spans called name.
func (r *Receiver) Named(name string) []Span {
	return r.Select(func(s Span) bool { return s.Name == name })
}

// Wait blocks until cond holds for the spans received so far, or ctx ends
// (then it returns ctx's error). cond is evaluated once at once and again
// after every export, under the receiver's lock: it must not keep or
// modify the slice, nor call the Receiver.
func (r *Receiver) Wait(ctx context.Context, cond func([]Span) bool) error {
	for {
		r.mu.Lock()
		ok := cond(r.spans)
		changed := r.changed
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Dump renders spans one per line (see Span.String), for failure messages.
func Dump(spans []Span) string {
	var b strings.Builder
	for _, s := range spans {
		b.WriteString("  ")
		b.WriteString(s.String())
		b.WriteString("\n")
	}
	return b.String()
}
