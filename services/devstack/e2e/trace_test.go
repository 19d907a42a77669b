package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/types/known/durationpb"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1/alertingv1connect"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/meshrun"
	"github.com/cronmesh/cronmesh/libs/telemetry"
	"github.com/cronmesh/cronmesh/libs/testkit/meshtest"
	"github.com/cronmesh/cronmesh/libs/testkit/otlptest"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
)

// targetCall is what the test target saw of one request.
type targetCall struct {
	webhookID   string
	traceparent string
	status      int
}

// flakyTarget answers the first request 500 and every later one 204, and
// records each request's webhook-id and traceparent.
type flakyTarget struct {
	mu    sync.Mutex
	calls []targetCall
}

func (f *flakyTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	status := http.StatusNoContent
	if len(f.calls) == 0 {
		status = http.StatusInternalServerError
	}
	f.calls = append(f.calls, targetCall{webhookID: r.Header.Get("webhook-id"), traceparent: r.Header.Get("traceparent"), status: status})
	f.mu.Unlock()
	w.WriteHeader(status)
}

func (f *flakyTarget) seen() []targetCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]targetCall(nil), f.calls...)
}

// TestTraceOfOneExecution checks the promise of docs/architecture.md
// ("Tracing"): one execution is one trace, from the trigger's firing through
// the broker hops, every delivery attempt (the target receives traceparent)
// and its retry, to the history's write and alerting's evaluation of every
// lifecycle event, each hop carrying the OpenTelemetry semantic-convention
// attributes of what it is (messaging, HTTP, database). The spans come from
// the real binaries through an OTLP/gRPC receiver; the Connect RPC the test
// makes is checked for the RPC attributes in its own trace.
func TestTraceOfOneExecution(t *testing.T) {
	t.Parallel()
	rcv := otlptest.New(t)
	target := &flakyTarget{}
	targetSrv := httptest.NewServer(target)
	t.Cleanup(targetSrv.Close)
	alertSink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(alertSink.Close)

	mesh := meshtest.Start(t, bins, meshtest.Options{
		APIKeys:      map[string]string{"tracing": meshKey},
		OTLPEndpoint: rcv.Endpoint(),
		RetryTiers:   []time.Duration{time.Second},
	})
	ctx := t.Context()

	// The test's own calls are traced too, so the RPC hop (client and
	// server spans of one Connect call) can be checked.
	tel, err := telemetry.Setup(ctx, telemetry.Options{ServiceName: "e2e-test", OTLPEndpoint: rcv.Endpoint()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	otelIC, err := otelconnect.NewInterceptor(otelconnect.WithTracerProvider(tel.TracerProvider),
		otelconnect.WithPropagator(tel.Propagator), otelconnect.WithoutMetrics())
	require.NoError(t, err)
	traced := connect.WithInterceptors(otelIC)

	jobs := registryv1connect.NewJobServiceClient(http.DefaultClient, mesh.Registry.URL, rpctest.Bearer(meshKey))
	alerts := alertingv1connect.NewAlertServiceClient(http.DefaultClient, mesh.Alerting.URL, rpctest.Bearer(meshKey))
	history := historyv1connect.NewHistoryServiceClient(http.DefaultClient, mesh.History.URL, rpctest.Bearer(meshKey), traced)

	// A rule that watches every job of the namespace, so alerting evaluates
	// the execution's events (three failures in a row: this execution,
	// which succeeds on its retry, opens nothing).
	channel, err := alerts.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: &alertingv1.Channel{
		DisplayName: "sink",
		Kind: &alertingv1.Channel_Webhook{Webhook: &alertingv1.WebhookChannel{
			Url: alertSink.URL, SigningSecret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		}},
	}}))
	require.NoError(t, err)
	_, err = alerts.CreateRule(ctx, connect.NewRequest(&alertingv1.CreateRuleRequest{Rule: &alertingv1.Rule{
		DisplayName: "three failures",
		Selector:    &alertingv1.JobSelector{},
		Condition:   &alertingv1.Rule_ConsecutiveFailures{ConsecutiveFailures: &alertingv1.ConsecutiveFailures{Count: 3}},
		ChannelIds:  []string{channel.Msg.GetChannel().GetId()},
	}}))
	require.NoError(t, err)

	// One execution: a one-time job whose target fails once, retried after
	// 1 s (the job's backoff and the mesh's only tier).
	maxRetries := int32(2)
	created, err := jobs.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: &registryv1.Job{
		DisplayName: "traced once",
		Schedule:    &registryv1.Schedule{Kind: &registryv1.Schedule_After{After: durationpb.New(time.Second)}},
		Target:      &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: targetSrv.URL + "/hook"}}},
		RetryPolicy: &registryv1.RetryPolicy{MaxRetries: &maxRetries, InitialBackoff: durationpb.New(time.Second)},
	}}))
	require.NoError(t, err)
	jobID := created.Msg.GetJob().GetId()

	var executionID string
	require.Eventually(t, func() bool {
		resp, err := history.ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{
			JobId: jobID, Statuses: []historyv1.ExecutionStatus{historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED},
		}))
		if err != nil || len(resp.Msg.GetExecutions()) == 0 {
			return false
		}
		executionID = resp.Msg.GetExecutions()[0].GetExecutionId()
		return true
	}, 60*time.Second, 250*time.Millisecond, "the execution did not succeed in the history; the target saw %+v", target.seen())

	// The trace id comes from the history, as a user would find it.
	got, err := history.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: executionID}))
	require.NoError(t, err)
	exec := got.Msg.GetExecution()
	require.Equal(t, int32(2), exec.GetAttempt(), "the execution succeeded on its retry: %v", got.Msg)
	require.Len(t, got.Msg.GetAttempts(), 2, "two attempts: %v", got.Msg)
	traceID := exec.GetTraceId()
	require.Len(t, traceID, 32, "the history keeps the execution's trace id")

	// The target saw both attempts, each carrying the execution's trace.
	calls := target.seen()
	require.Len(t, calls, 2, "the target saw the failed attempt and its retry")
	for i, c := range calls {
		require.Equal(t, executionID, c.webhookID, "attempt %d", i+1)
		parts := strings.Split(c.traceparent, "-")
		require.Len(t, parts, 4, "attempt %d: traceparent %q is W3C", i+1, c.traceparent)
		require.Equal(t, traceID, parts[1], "attempt %d: the target's traceparent carries the execution's trace id", i+1)
	}

	// Spans are exported in batches (every 5 s at most, and on shutdown):
	// wait until the trace holds what every service contributes.
	want := traceWant{names: mesh.Names, executionID: executionID, traceID: traceID, targetURL: targetSrv.URL} // spans carry the scheme and host only: a path can be a capability
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = rcv.Wait(waitCtx, func(all []otlptest.Span) bool { return want.complete(all) })
	spans := rcv.Trace(traceID)
	dump := fmt.Sprintf("trace %s holds %d spans:\n%s", traceID, len(spans), otlptest.Dump(spans))
	want.check(t, spans, calls, dump)

	// The RPC hop: the history's server span of the GetExecution call above
	// continues the test's client span, with the RPC attributes.
	require.NoError(t, rcv.Wait(waitCtx, func(all []otlptest.Span) bool {
		for _, s := range all {
			if s.Service == "history" && s.Name == getExecution && s.Kind == tracepb.Span_SPAN_KIND_SERVER {
				return true
			}
		}
		return false
	}), "no server span of %s from the history; spans of the history:\n%s", getExecution, otlptest.Dump(rcv.Service("history")))
	require.NoError(t, tel.ForceFlush(ctx))
	clients := rcv.Select(func(s otlptest.Span) bool { return s.Service == "e2e-test" && s.Name == getExecution })
	require.NotEmpty(t, clients, "the test's client span of %s", getExecution)
	client := clients[len(clients)-1]
	rpcTrace := rcv.Trace(client.TraceID)
	rpcDump := fmt.Sprintf("the call's trace holds:\n%s", otlptest.Dump(rpcTrace))
	// semconv 1.43 (the pinned otel's) spells Connect "connectrpc".
	requireAttrs(t, client, map[string]string{"rpc.system.name": "connectrpc", "rpc.method": getExecution}, rpcDump)
	server := one(t, rpcTrace, rpcDump, "server span", func(s otlptest.Span) bool {
		return s.Service == "history" && s.Kind == tracepb.Span_SPAN_KIND_SERVER
	})
	require.Equal(t, getExecution, server.Name)
	require.Equal(t, client.SpanID, server.ParentSpanID, "the server span continues the client's; %s", rpcDump)
	requireAttrs(t, server, map[string]string{
		"rpc.system.name": "connectrpc", "rpc.method": getExecution, "rpc.response.status_code": "OK",
	}, rpcDump)
	// Its queries are database client spans under it.
	queries := pick(rpcTrace, func(s otlptest.Span) bool {
		return s.Service == "history" && s.Kind == tracepb.Span_SPAN_KIND_CLIENT && s.ParentSpanID == server.SpanID && s.Name == "SELECT"
	})
	require.NotEmpty(t, queries, "the history's queries; %s", rpcDump)
	for _, q := range queries {
		requireAttrs(t, q, map[string]string{"db.system.name": "postgresql", "db.operation.name": "SELECT"}, rpcDump)
	}
}

// getExecution is the procedure (and otelconnect's span name) of
// HistoryService.GetExecution.
const getExecution = "cronmesh.history.v1.HistoryService/GetExecution"

// traceWant is what the trace of the test's execution must hold.
type traceWant struct {
	names                           meshrun.Names
	executionID, traceID, targetURL string
}

// spanCount is how many spans of a service and name the trace holds at
// least once complete: one firing and one publish by the trigger; two
// attempts (process and HTTP call), one retry publish and two lifecycle
// events (the outcome of each attempt: the target answers at once, well
// within the dispatcher's --started-event-after, so no attempt has a
// STARTED) by the dispatcher; a write and an evaluation of each event.
func (w traceWant) spanCounts() map[[2]string]int {
	return map[[2]string]int{
		{"trigger", "trigger.execution"}:                               1,
		{"trigger", "publish " + w.names.Dispatch}:                     1,
		{"dispatcher", "process " + w.names.DispatchQueue + ".normal"}: 2,
		{"dispatcher", "POST"}:                                         2,
		{"dispatcher", "publish " + w.names.Retry}:                     1,
		{"dispatcher", "create " + w.names.Executions}:                 2,
		{"history", "history.write"}:                                   2,
		{"alerting", "alerting.evaluate"}:                              2,
	}
}

func (w traceWant) complete(all []otlptest.Span) bool {
	got := map[[2]string]int{}
	for _, s := range all {
		if s.TraceID == w.traceID {
			got[[2]string{s.Service, s.Name}]++
		}
	}
	for k, n := range w.spanCounts() {
		if got[k] < n {
			return false
		}
	}
	return true
}

// one returns the single span of the trace that matches, failing otherwise.
func one(t *testing.T, spans []otlptest.Span, dump, what string, keep func(otlptest.Span) bool) otlptest.Span {
	t.Helper()
	got := pick(spans, keep)
	require.Len(t, got, 1, "want exactly one %s; %s", what, dump)
	return got[0]
}

func pick(spans []otlptest.Span, keep func(otlptest.Span) bool) []otlptest.Span {
	var out []otlptest.Span
	for _, s := range spans {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

func named(service, name string) func(otlptest.Span) bool {
	return func(s otlptest.Span) bool { return s.Service == service && s.Name == name }
}

// requireAttrs checks that span has every attribute of want (values
// compared as text).
func requireAttrs(t *testing.T, span otlptest.Span, want map[string]string, dump string) {
	t.Helper()
	for k, v := range want {
		got, ok := span.Attr(k)
		require.True(t, ok, "span %s lacks attribute %s; %s", span, k, dump)
		require.Equal(t, v, got, "span %s: attribute %s; %s", span, k, dump)
	}
}

func (w traceWant) check(t *testing.T, spans []otlptest.Span, calls []targetCall, dump string) {
	t.Helper()
	for k, n := range w.spanCounts() {
		require.GreaterOrEqual(t, len(pick(spans, named(k[0], k[1]))), n, "want %d span(s) %q of %s; %s", n, k[1], k[0], dump)
	}
	byID := map[string]otlptest.Span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	childOf := func(child, parent otlptest.Span) {
		t.Helper()
		require.Equal(t, parent.SpanID, child.ParentSpanID, "span %s should be a child of %s; %s", child, parent, dump)
	}

	// The trigger: the execution's root span, and the relay's publish.
	root := one(t, spans, dump, "firing span", named("trigger", "trigger.execution"))
	require.Empty(t, root.ParentSpanID, "the firing span is the trace's root; %s", dump)
	requireAttrs(t, root, map[string]string{"cronmesh.execution_id": w.executionID}, dump)
	publish := one(t, spans, dump, "dispatch publish", named("trigger", "publish "+w.names.Dispatch))
	childOf(publish, root)
	require.Equal(t, tracepb.Span_SPAN_KIND_PRODUCER, publish.Kind)
	requireAttrs(t, publish, map[string]string{
		"messaging.system": "rabbitmq", "messaging.operation.type": "send",
		"messaging.destination.name": w.names.Dispatch, "messaging.message.id": w.executionID,
	}, dump)

	// The dispatcher: two attempts, each consumed and delivered over HTTP;
	// the first one's retry is published to the delay exchange, and the
	// second attempt continues from that publish (the context crossed the
	// delay queue).
	process := pick(spans, named("dispatcher", "process "+w.names.DispatchQueue+".normal"))
	require.Len(t, process, 2, "two attempts; %s", dump)
	retry := one(t, spans, dump, "retry publish", named("dispatcher", "publish "+w.names.Retry))
	require.Equal(t, tracepb.Span_SPAN_KIND_PRODUCER, retry.Kind)
	requireAttrs(t, retry, map[string]string{
		"messaging.system": "rabbitmq", "messaging.operation.type": "send",
		"messaging.destination.name": w.names.Retry, "messaging.message.id": w.executionID,
	}, dump)
	wantStatus := []string{"500", "204"}
	for i, p := range process {
		attempt := fmt.Sprint(i + 1)
		require.Equal(t, tracepb.Span_SPAN_KIND_CONSUMER, p.Kind)
		requireAttrs(t, p, map[string]string{
			"messaging.system": "rabbitmq", "messaging.operation.type": "process",
			"messaging.destination.name":              w.names.Dispatch,
			"messaging.destination.subscription.name": w.names.DispatchQueue + ".normal",
			"messaging.message.id":                    w.executionID,
			"cronmesh.attempt":                        attempt,
		}, dump)
		if i == 0 {
			childOf(p, publish)
			childOf(retry, p)
		} else {
			childOf(p, retry)
		}
		call := one(t, spans, dump, "HTTP call of attempt "+attempt, func(s otlptest.Span) bool {
			return s.Service == "dispatcher" && s.Name == "POST" && s.ParentSpanID == p.SpanID
		})
		require.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, call.Kind)
		requireAttrs(t, call, map[string]string{
			"http.request.method": "POST", "url.full": w.targetURL, "server.address": "127.0.0.1",
			"http.response.status_code": wantStatus[i],
		}, dump)
		// The target got this attempt's traceparent: the trace, and the
		// HTTP call's span as the parent.
		require.Equal(t, "00-"+w.traceID+"-"+call.SpanID+"-01", calls[i].traceparent, "attempt %s's traceparent; %s", attempt, dump)

		// Its lifecycle event, the outcome alone (a quick attempt has no
		// STARTED), created under the attempt, then written by the
		// history and evaluated by alerting in this trace.
		creates := pick(spans, func(s otlptest.Span) bool {
			return s.Service == "dispatcher" && s.Name == "create "+w.names.Executions && s.ParentSpanID == p.SpanID
		})
		require.Len(t, creates, 1, "attempt %s creates one event, its outcome; %s", attempt, dump)
		for _, c := range creates {
			require.Equal(t, tracepb.Span_SPAN_KIND_PRODUCER, c.Kind)
			requireAttrs(t, c, map[string]string{
				"messaging.system": "rabbitmq", "messaging.operation.type": "create",
				"messaging.destination.name": w.names.Executions, "cronmesh.attempt": attempt,
			}, dump)
			eventID, _ := c.Attr("messaging.message.id")
			require.NotEmpty(t, eventID, "event id; %s", dump)
			for _, consumer := range []struct{ service, name, queue string }{
				{"history", "history.write", w.names.HistoryExecutions},
				{"alerting", "alerting.evaluate", w.names.AlertingExecutions},
			} {
				got := pick(spans, func(s otlptest.Span) bool {
					return s.Service == consumer.service && s.Name == consumer.name && s.ParentSpanID == c.SpanID
				})
				require.NotEmpty(t, got, "%s of event %s; %s", consumer.name, eventID, dump)
				for _, s := range got {
					require.Equal(t, tracepb.Span_SPAN_KIND_CONSUMER, s.Kind)
					want := map[string]string{
						"messaging.system": "rabbitmq", "messaging.operation.type": "process",
						"messaging.destination.name":              w.names.Executions,
						"messaging.destination.subscription.name": consumer.queue,
						"messaging.message.id":                    eventID,
						"cronmesh.execution.id":                   w.executionID,
					}
					if consumer.service == "history" {
						want["db.system.name"] = "postgresql"
						want["db.operation.name"] = "INSERT"
					}
					requireAttrs(t, s, want, dump)
					require.NotEmpty(t, s.Links, "span %s links its batch; %s", s, dump)
				}
			}
		}
	}
	// Only the failed HTTP call is an error.
	failed := pick(spans, func(s otlptest.Span) bool { return s.StatusCode == tracepb.Status_STATUS_CODE_ERROR })
	require.Len(t, failed, 1, "one error span, the 500; %s", dump)
	code, _ := failed[0].Attr("http.response.status_code")
	require.Equal(t, "500", code, "the error span is the 500; %s", dump)
}
