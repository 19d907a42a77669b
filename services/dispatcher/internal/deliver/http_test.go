package deliver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/webhooksign"
)

const testExecutionID = "0195b9a4-5c1e-5f63-9e9b-2f4a1c3d5e6f"

// testNow is the fake clock's reading: the webhook-timestamp of every
// request in these tests.
func testNow() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }

func loopbackNetworks() []netip.Prefix {
	return []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
}

// newTestClient is a Client that allows loopback, on a fake clock; mod
// adjusts the options first.
func newTestClient(t testing.TB, mod func(*Options)) (*Client, *clock.Fake) {
	t.Helper()
	fake := clock.NewFake(testNow())
	opts := Options{AllowedNetworks: loopbackNetworks(), Clock: fake}
	if mod != nil {
		mod(&opts)
	}
	c, err := New(opts)
	require.NoError(t, err)
	t.Cleanup(c.CloseIdleConnections)
	return c, fake
}

// vectorSecret is the Standard Webhooks specification's test-vector secret
// (libs/webhooksign tests the vector itself).
const vectorSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// httpRequest is attempt 1 of an HTTP job calling url, signed with the spec
// vector's secret; mod adjusts the target.
func httpRequest(url string, mod func(*registryv1.HttpTarget)) *dispatchv1.DispatchRequest {
	target := &registryv1.HttpTarget{
		Method:        "POST",
		Url:           url,
		Body:          `{"hello":"world"}`,
		SigningSecret: vectorSecret,
	}
	if mod != nil {
		mod(target)
	}
	return &dispatchv1.DispatchRequest{
		ExecutionId: testExecutionID,
		JobId:       "0195b9a4-0000-7000-8000-000000000001",
		Namespace:   "alpha",
		Attempt:     1,
		Target:      &registryv1.Target{Kind: &registryv1.Target_Http{Http: target}},
	}
}

// received is one request as the target saw it.
type received struct {
	method, uri string
	header      http.Header
	body        []byte
}

// target is an httptest server on 127.0.0.1 that records every request and
// answers with respond.
type target struct {
	*httptest.Server
	hits atomic.Int64
	reqs chan received
}

func newTarget(t *testing.T, respond http.HandlerFunc) *target {
	t.Helper()
	tg := &target{reqs: make(chan received, 128)}
	tg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		select {
		case tg.reqs <- received{method: r.Method, uri: r.RequestURI, header: r.Header.Clone(), body: body}:
		default:
		}
		respond(w, r)
	}))
	t.Cleanup(tg.Close)
	return tg
}

func status(code int, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		_, _ = fmt.Fprintf(w, "status %d", code)
	}
}

func TestHTTPStatusClassification(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		code           int
		header         []string
		accepted       []int32
		want           Result
		wantRetryAfter time.Duration
		wantReason     string
	}{
		{name: "200", code: 200, want: Succeeded},
		{name: "204", code: 204, want: Succeeded},
		{name: "299", code: 299, want: Succeeded},
		{name: "accepted 202", code: 202, accepted: []int32{202}, want: Succeeded},
		{name: "200 outside accepted codes", code: 200, accepted: []int32{202}, want: Permanent, wantReason: "HTTP 200 OK is not one of the job's accepted status codes"},
		{name: "accepted 404", code: 404, accepted: []int32{200, 404}, want: Succeeded},
		{name: "500", code: 500, want: Retryable, wantReason: "HTTP 500 Internal Server Error"},
		{name: "500 outside accepted codes", code: 500, accepted: []int32{202}, want: Retryable},
		{name: "502", code: 502, want: Retryable},
		{name: "503 retry-after seconds", code: 503, header: []string{"Retry-After", "120"}, want: Retryable, wantRetryAfter: 2 * time.Minute},
		{
			name: "503 retry-after date", code: 503, want: Retryable, wantRetryAfter: 90 * time.Second,
			header: []string{"Retry-After", testNow().Add(90 * time.Second).Format(http.TimeFormat)},
		},
		{name: "429 retry-after clamped", code: 429, header: []string{"Retry-After", "7200"}, want: Retryable, wantRetryAfter: time.Hour},
		{name: "429 negative retry-after", code: 429, header: []string{"Retry-After", "-5"}, want: Retryable},
		{
			name: "429 past retry-after date", code: 429, want: Retryable,
			header: []string{"Retry-After", testNow().Add(-time.Minute).Format(http.TimeFormat)},
		},
		{name: "429 garbage retry-after", code: 429, header: []string{"Retry-After", "soon"}, want: Retryable},
		{name: "408", code: 408, want: Retryable, wantReason: "HTTP 408 Request Timeout"},
		{name: "400", code: 400, want: Permanent, wantReason: "HTTP 400 Bad Request"},
		{name: "401", code: 401, want: Permanent},
		{name: "404", code: 404, want: Permanent, wantReason: "HTTP 404 Not Found"},
		{name: "410", code: 410, want: Permanent},
		{name: "304", code: 304, want: Permanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newTarget(t, status(tt.code, tt.header...))
			c, _ := newTestClient(t, nil)
			out := deliverNow(c, context.Background(), httpRequest(srv.URL, func(h *registryv1.HttpTarget) {
				h.AcceptedStatusCodes = tt.accepted
			}))
			require.Equal(t, tt.want, out.Result, out.Reason)
			require.Equal(t, tt.code, out.StatusCode)
			require.Equal(t, tt.wantRetryAfter, out.RetryAfter)
			require.Positive(t, out.Duration)
			if tt.want == Succeeded {
				require.Empty(t, out.Reason)
			} else {
				require.NotEmpty(t, out.Reason)
			}
			if tt.wantReason != "" {
				require.Equal(t, tt.wantReason, out.Reason)
			}
			if tt.code != 304 && tt.code != 204 {
				require.Equal(t, fmt.Sprintf("status %d", tt.code), out.Excerpt)
			}
			require.Equal(t, int64(1), srv.hits.Load())
		})
	}
}

func TestHTTPRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	elsewhere := newTarget(t, status(200))
	srv := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/moved", http.StatusFound)
	})
	c, _ := newTestClient(t, nil)

	out := deliverNow(c, context.Background(), httpRequest(srv.URL+"/hook", nil))
	require.Equal(t, Permanent, out.Result)
	require.Equal(t, http.StatusFound, out.StatusCode)
	require.Equal(t, "HTTP 302 Found (redirects are not followed)", out.Reason)
	require.Equal(t, elsewhere.URL+"/moved", out.Headers.Get("Location"))
	require.Equal(t, int64(1), srv.hits.Load())
	require.Zero(t, elsewhere.hits.Load(), "the redirect target was requested")
}

func TestHTTPTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		jobTimeout time.Duration
		maxTimeout time.Duration
		want       time.Duration
	}{
		{"job timeout", time.Second, 0, time.Second},
		{"capped by MaxTimeout", 5 * time.Minute, time.Second, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The handler holds the response until the client gives up.
			srv := newTarget(t, func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
			c, _ := newTestClient(t, func(o *Options) { o.MaxTimeout = tt.maxTimeout })
			out := deliverNow(c, context.Background(), httpRequest(srv.URL, func(h *registryv1.HttpTarget) {
				h.Timeout = durationpb.New(tt.jobTimeout)
			}))
			require.Equal(t, Retryable, out.Result)
			require.Equal(t, "timeout after "+tt.want.String(), out.Reason)
			require.Zero(t, out.StatusCode)
			require.GreaterOrEqual(t, out.Duration, tt.want)
			require.Less(t, out.Duration, tt.want+30*time.Second)
		})
	}
}

func TestHTTPParentContextCanceled(t *testing.T) {
	t.Parallel()
	srv := newTarget(t, status(200))
	c, _ := newTestClient(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := deliverNow(c, ctx, httpRequest(srv.URL, nil))
	require.Equal(t, Retryable, out.Result)
	require.Equal(t, "delivery canceled: context canceled", out.Reason)
}

func TestHTTPConnectionRefusedIsRetryable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close() // nothing listens there any more
	c, _ := newTestClient(t, nil)
	out := deliverNow(c, context.Background(), httpRequest(addr+"/hook?token=s3cr3t", nil))
	require.Equal(t, Retryable, out.Result)
	require.Contains(t, out.Reason, "connection refused")
	require.NotContains(t, out.Reason, "s3cr3t")
}

func TestHTTPExcerpt(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	// The excerpt is read by the declared length when there is one, and
	// to the end of a chunked body otherwise.
	const (
		asWritten = iota // net/http declares the length of a small body, chunks a large one
		declared         // Content-Length set by the handler
		chunked          // flushed before the body: no length
	)
	tests := []struct {
		name, body, want string
		framing          int
	}{
		{"1 MiB body cut at MaxExcerpt", big, big[:MaxExcerpt], asWritten},
		{"1 MiB body of declared length cut at MaxExcerpt", big, big[:MaxExcerpt], declared},
		{"exactly MaxExcerpt", big[:MaxExcerpt], big[:MaxExcerpt], asWritten},
		{"exactly MaxExcerpt, declared", big[:MaxExcerpt], big[:MaxExcerpt], declared},
		{"small body whole", `{"ok":true}`, `{"ok":true}`, asWritten},
		{"small body chunked", `{"ok":true}`, `{"ok":true}`, chunked},
		{"empty body", "", "", asWritten},
		{"empty body chunked", "", "", chunked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newTarget(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("X-Target", "yes")
				switch tt.framing {
				case declared:
					w.Header().Set("Content-Length", strconv.Itoa(len(tt.body)))
				case chunked:
					w.(http.Flusher).Flush()
				}
				_, _ = io.WriteString(w, tt.body)
			})
			c, _ := newTestClient(t, nil)
			out := deliverNow(c, context.Background(), httpRequest(srv.URL, nil))
			require.Equal(t, Succeeded, out.Result, out.Reason)
			require.Equal(t, tt.want, out.Excerpt)
			require.Equal(t, "yes", out.Headers.Get("X-Target"))
		})
	}
}

func TestHTTPExcerptScrubsSecretHeaders(t *testing.T) {
	t.Parallel()
	// An echoing endpoint returns the request's headers in its body.
	srv := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, `{"auth":%q,"token":%q,"bare":%q,"short":%q}`,
			r.Header.Get("Authorization"), r.Header.Get("X-Token"), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), r.Header.Get("X-Pin"))
	})
	c, _ := newTestClient(t, nil)
	out := deliverNow(c, context.Background(), httpRequest(srv.URL, func(h *registryv1.HttpTarget) {
		h.SecretHeaders = map[string]string{"Authorization": "Bearer b3arer-t0ken", "X-Token": "x-t0ken-value", "X-Pin": "1234"}
	}))
	require.Equal(t, Permanent, out.Result)
	require.Equal(t, `{"auth":"[redacted]","token":"[redacted]","bare":"[redacted]","short":"1234"}`, out.Excerpt,
		"secret values (and a bearer's token) never reach the dead letters; values under 6 bytes are left alone")
}

func TestHTTPRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		mod             func(*registryv1.HttpTarget)
		wantMethod      string
		wantBody        string
		wantContentType string
		wantUserAgent   string
		wantHeaders     map[string]string
	}{
		{
			name: "POST with custom headers",
			mod: func(h *registryv1.HttpTarget) {
				h.Url += "/hooks/nightly?tenant=alpha"
				h.Headers = map[string]string{"X-Custom": "one", "authorization": "Bearer t0k3n"}
			},
			wantMethod: "POST", wantBody: `{"hello":"world"}`,
			wantContentType: "application/json", wantUserAgent: DefaultUserAgent,
			wantHeaders: map[string]string{"X-Custom": "one", "Authorization": "Bearer t0k3n"},
		},
		{
			name: "secret headers are sent like the others",
			mod: func(h *registryv1.HttpTarget) {
				h.Headers = map[string]string{"X-Custom": "one"}
				h.SecretHeaders = map[string]string{"x-token": "s3cr3t", "Authorization": "Bearer t0k3n"}
			},
			wantMethod: "POST", wantBody: `{"hello":"world"}`,
			wantContentType: "application/json", wantUserAgent: DefaultUserAgent,
			wantHeaders: map[string]string{"X-Custom": "one", "X-Token": "s3cr3t", "Authorization": "Bearer t0k3n"},
		},
		{
			name: "PUT with the job's content type and user agent",
			mod: func(h *registryv1.HttpTarget) {
				h.Method = "put"
				h.Body = "plain text"
				h.Headers = map[string]string{"Content-Type": "text/plain", "User-Agent": "mine/2"}
			},
			wantMethod: "PUT", wantBody: "plain text", wantContentType: "text/plain", wantUserAgent: "mine/2",
		},
		{
			name:       "GET without a body",
			mod:        func(h *registryv1.HttpTarget) { h.Method = "GET"; h.Body = "" },
			wantMethod: "GET", wantUserAgent: DefaultUserAgent,
		},
		{
			name:       "default method POST",
			mod:        func(h *registryv1.HttpTarget) { h.Method = "" },
			wantMethod: "POST", wantBody: `{"hello":"world"}`, wantContentType: "application/json", wantUserAgent: DefaultUserAgent,
		},
		{
			name: "the job cannot override the signature or the idempotency key",
			mod: func(h *registryv1.HttpTarget) {
				h.Headers = map[string]string{"webhook-id": "forged", "Webhook-Signature": "v1,forged", "Idempotency-Key": "forged"}
			},
			wantMethod: "POST", wantBody: `{"hello":"world"}`, wantContentType: "application/json", wantUserAgent: DefaultUserAgent,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newTarget(t, status(204))
			c, fake := newTestClient(t, nil)
			req := httpRequest(srv.URL, tt.mod)
			out := deliverNow(c, context.Background(), req)
			require.Equal(t, Succeeded, out.Result, out.Reason)

			got := <-srv.reqs
			require.Equal(t, tt.wantMethod, got.method)
			wantURI, err := url.Parse(req.GetTarget().GetHttp().GetUrl())
			require.NoError(t, err)
			require.Equal(t, wantURI.RequestURI(), got.uri)
			require.Equal(t, tt.wantBody, string(got.body))
			require.Equal(t, tt.wantContentType, got.header.Get("Content-Type"))
			require.Equal(t, tt.wantUserAgent, got.header.Get("User-Agent"))
			for k, v := range tt.wantHeaders {
				require.Equal(t, v, got.header.Get(k), k)
			}
			require.Equal(t, testExecutionID, got.header.Get(webhooksign.HeaderWebhookID))
			require.Equal(t, []string{testExecutionID}, got.header.Values(webhooksign.HeaderIdempotencyKey))
			require.Equal(t, strconv.FormatInt(testNow().Unix(), 10), got.header.Get(webhooksign.HeaderWebhookTimestamp))
			require.Len(t, got.header.Values(webhooksign.HeaderWebhookSignature), 1)

			// A Standard Webhooks receiver accepts it...
			require.NoError(t, webhooksign.Verify(vectorSecret, got.header, got.body, 0, fake.Now()))
			// ...but not with another secret, a changed body, or later.
			other := "whsec_" + strings.Repeat("A", 32)
			require.ErrorIs(t, webhooksign.Verify(other, got.header, got.body, 0, fake.Now()), webhooksign.ErrNoMatchingSignature)
			require.ErrorIs(t, webhooksign.Verify(vectorSecret, got.header, append(got.body, ' '), 0, fake.Now()), webhooksign.ErrNoMatchingSignature)
			require.ErrorIs(t, webhooksign.Verify(vectorSecret, got.header, got.body, 0, fake.Now().Add(10*time.Minute)), webhooksign.ErrTimestampTooOld)
		})
	}
}

// TestHTTPPreparedAheadIsSignedForItsSendingSecond: a request prepared
// before its slot's time reaches nothing until it is made, and is signed
// for the second it is sent in: the slot's, when it is made then, or a
// later one, when it is made late.
func TestHTTPPreparedAheadIsSignedForItsSendingSecond(t *testing.T) {
	t.Parallel()
	for _, late := range []time.Duration{0, 2500 * time.Millisecond} {
		t.Run(fmt.Sprintf("made %s after the slot", late), func(t *testing.T) {
			t.Parallel()
			srv := newTarget(t, status(204))
			c, fake := newTestClient(t, nil)
			slot := testNow().Add(3 * time.Second)
			req := httpRequest(srv.URL, nil)
			req.NotBefore = timestamppb.New(slot)

			attempt := c.Prepare(context.Background(), req)
			require.Empty(t, srv.reqs, "preparing sent the request")
			fake.Set(slot.Add(late))
			out := attempt.Make(context.Background())
			require.Equal(t, Succeeded, out.Result, out.Reason)

			got := <-srv.reqs
			require.Equal(t, strconv.FormatInt(fake.Now().Unix(), 10), got.header.Get(webhooksign.HeaderWebhookTimestamp))
			require.NoError(t, webhooksign.Verify(vectorSecret, got.header, got.body, 0, fake.Now()))
		})
	}
}

func TestHTTPTraceContext(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv := newTarget(t, status(503))
	c, _ := newTestClient(t, func(o *Options) { o.TracerProvider = tp })

	ctx, parent := tp.Tracer("test").Start(context.Background(), "consume")
	ts, err := trace.ParseTraceState("vendor=abc")
	require.NoError(t, err)
	ctx = trace.ContextWithSpanContext(ctx, parent.SpanContext().WithTraceState(ts))
	out := deliverNow(c, ctx, httpRequest(srv.URL+"/services/T000/B000/capability-s3cr3t?token=s3cr3t", func(h *registryv1.HttpTarget) {
		h.SecretHeaders = map[string]string{"X-Token": "header-s3cr3t"}
	}))
	parent.End()
	require.Equal(t, Retryable, out.Result)

	var client sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindClient {
			client = s
		}
	}
	require.NotNil(t, client, "no client span")
	require.Equal(t, "POST", client.Name())
	require.Equal(t, parent.SpanContext().SpanID(), client.Parent().SpanID())
	require.Equal(t, parent.SpanContext().TraceID(), client.SpanContext().TraceID())

	got := <-srv.reqs
	want := fmt.Sprintf("00-%s-%s-01", client.SpanContext().TraceID(), client.SpanContext().SpanID())
	require.Equal(t, want, got.header.Get("Traceparent"))
	require.Equal(t, "vendor=abc", got.header.Get("Tracestate"))

	u := strings.TrimPrefix(srv.URL, "http://")
	host, portStr, _ := strings.Cut(u, ":")
	p, _ := strconv.Atoi(portStr)
	attrs := attribute.NewSet(client.Attributes()...)
	for _, kv := range []attribute.KeyValue{
		semconv.HTTPRequestMethodKey.String("POST"),
		semconv.URLFull(srv.URL), // scheme and host only: a path or query may be the credential
		semconv.ServerAddress(host),
		semconv.ServerPort(p),
		semconv.HTTPResponseStatusCode(503),
		semconv.ErrorTypeKey.String("503"),
		attribute.String("cronmesh.execution.id", testExecutionID),
	} {
		v, ok := attrs.Value(kv.Key)
		require.True(t, ok, kv.Key)
		require.Equal(t, kv.Value, v, kv.Key)
	}
	require.Equal(t, "Error", client.Status().Code.String())
	for _, kv := range client.Attributes() {
		require.NotContains(t, kv.Value.String(), "s3cr3t", kv.Key)
	}
}

// TestHTTPTraceContextNotSampled: under an unsampled attempt no client
// span is made (nobody would record it), and the target gets the
// attempt's own context, not sampled, in the same trace.
func TestHTTPTraceContextNotSampled(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv := newTarget(t, status(200))
	c, _ := newTestClient(t, func(o *Options) { o.TracerProvider = tp })

	ctx, parent := tp.Tracer("test").Start(context.Background(), "consume")
	require.False(t, parent.SpanContext().IsSampled())
	out := deliverNow(c, ctx, httpRequest(srv.URL, nil))
	parent.End()
	require.Equal(t, Succeeded, out.Result, out.Reason)
	require.Empty(t, rec.Ended(), "no span is recorded")
	got := <-srv.reqs
	want := fmt.Sprintf("00-%s-%s-00", parent.SpanContext().TraceID(), parent.SpanContext().SpanID())
	require.Equal(t, want, got.header.Get("Traceparent"))
}

func TestHTTPTraceContextWithoutTracer(t *testing.T) {
	t.Parallel()
	// Without a TracerProvider no span is made, and the caller's span
	// context travels as it is.
	srv := newTarget(t, status(200))
	c, _ := newTestClient(t, nil)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	out := deliverNow(c, trace.ContextWithSpanContext(context.Background(), sc), httpRequest(srv.URL, nil))
	require.Equal(t, Succeeded, out.Result, out.Reason)
	got := <-srv.reqs
	h := propagation.HeaderCarrier(got.header)
	require.Equal(t, "00-01020300000000000000000000000000-0405060000000000-01", h.Get("traceparent"))
}

func TestHTTPInvalidRequests(t *testing.T) {
	t.Parallel()
	srv := newTarget(t, status(200))
	tests := []struct {
		name string
		req  *dispatchv1.DispatchRequest
		want string
	}{
		{"nil request", nil, "no dispatch request"},
		{"no execution id", &dispatchv1.DispatchRequest{Target: httpRequest(srv.URL, nil).GetTarget()}, "dispatch request has no execution id"},
		{"no target", &dispatchv1.DispatchRequest{ExecutionId: testExecutionID}, "job has no target"},
		{"no signing secret", httpRequest(srv.URL, func(h *registryv1.HttpTarget) { h.SigningSecret = "" }), "no signing secret"},
		{"invalid signing secret", httpRequest(srv.URL, func(h *registryv1.HttpTarget) { h.SigningSecret = "whsec_c2hvcnQ=" }), "invalid signing secret"},
		{"secret without prefix", httpRequest(srv.URL, func(h *registryv1.HttpTarget) { h.SigningSecret = vectorSecret[6:] }), "invalid signing secret"},
		{"ftp scheme", httpRequest("ftp://127.0.0.1/file", nil), `invalid URL: scheme "ftp" is not http or https`},
		{"file scheme", httpRequest("file:///etc/passwd", nil), `invalid URL: scheme "file" is not http or https`},
		{"no host", httpRequest("http:///path", nil), "invalid URL: no host"},
		{"relative", httpRequest("/path", nil), `invalid URL: scheme "" is not http or https`},
		{"unparsable", httpRequest("http://127.0.0.1:port/", nil), `invalid URL: invalid port ":port" after host`},
		{"bad method", httpRequest(srv.URL, func(h *registryv1.HttpTarget) { h.Method = "GET /x" }), `invalid request: net/http: invalid method "GET /X"`},
		{"bad header name", httpRequest(srv.URL, func(h *registryv1.HttpTarget) { h.Headers = map[string]string{"Bad Header": "x"} }), `invalid header "Bad Header"`},
		{"header injection", httpRequest(srv.URL, func(h *registryv1.HttpTarget) { h.Headers = map[string]string{"X-A": "1\r\nX-B: 2"} }), `invalid header "X-A"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := newTestClient(t, nil)
			out := deliverNow(c, context.Background(), tt.req)
			require.Equal(t, Permanent, out.Result)
			require.Equal(t, tt.want, out.Reason)
			require.NotContains(t, out.Reason, "whsec_")
			require.NotContains(t, out.Reason, vectorSecret[6:])
		})
	}
	require.Zero(t, srv.hits.Load())
}

func TestHTTPSSRFRefused(t *testing.T) {
	t.Parallel()
	srv := newTarget(t, status(200))
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	tests := []struct {
		name, url, want string
	}{
		{"loopback IP", srv.URL, "target refused: 127.0.0.1 is a loopback address"},
		{"hostname resolving to loopback", "http://localhost:" + port, "is a loopback address"},
		// Go dials a mapped address over IPv4, so Control sees 127.0.0.1.
		{"IPv4-mapped loopback", "http://[::ffff:127.0.0.1]:" + port, "target refused: 127.0.0.1 is a loopback address"},
		{"unspecified", "http://0.0.0.0:" + port, "target refused: 0.0.0.0 is an unspecified address"},
		// Refused in the dial's Control, before connect(2): no packet
		// leaves, so these are safe to run anywhere.
		{"cloud metadata", "http://169.254.169.254/latest/meta-data/", "target refused: 169.254.169.254 is a cloud metadata address"},
		{"private", "https://10.0.0.7/hook", "target refused: 10.0.0.7 is a private address"},
		{"IPv6 metadata", "http://[fd00:ec2::254]/latest", "target refused: fd00:ec2::254 is a cloud metadata address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := newTestClient(t, func(o *Options) { o.AllowedNetworks = nil })
			out := deliverNow(c, context.Background(), httpRequest(tt.url, nil))
			require.Equal(t, Permanent, out.Result, out.Reason)
			require.Contains(t, out.Reason, tt.want)
			require.True(t, strings.HasPrefix(out.Reason, "target refused: "), out.Reason)
			require.Zero(t, out.StatusCode)
		})
	}
	require.Zero(t, srv.hits.Load(), "a refused target was connected to")
}

func TestHTTPS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(status(200))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	tests := []struct {
		name string
		tls  *tls.Config
		want Result
	}{
		{"trusted", &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, Succeeded},
		{"unknown authority", nil, Retryable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := newTestClient(t, func(o *Options) { o.TLSConfig = tt.tls })
			out := deliverNow(c, context.Background(), httpRequest(srv.URL, nil))
			require.Equal(t, tt.want, out.Result, out.Reason)
		})
	}
}

func TestHTTPConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	const n = 50
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get(webhooksign.HeaderWebhookID)] = true
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	c, _ := newTestClient(t, nil)

	outs := make([]Outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req := httpRequest(srv.URL, nil)
			req.ExecutionId = fmt.Sprintf("exec-%02d", i)
			outs[i] = deliverNow(c, context.Background(), req)
		})
	}
	wg.Wait()
	for i, out := range outs {
		require.Equal(t, Succeeded, out.Result, "delivery %d: %s", i, out.Reason)
	}
	require.Equal(t, int64(n), srv.hits.Load())
	require.Len(t, seen, n)
}

// TestHTTPSlotHeadersAndTemplate delivers a templated job's first attempt
// and its retry to a real HTTP receiver, which checks the signature, the
// slot headers against the signed webhook-id, and the rendered body.
func TestHTTPSlotHeadersAndTemplate(t *testing.T) {
	t.Parallel()
	const jobID = "0195b9a4-0000-7000-8000-000000000001"
	nominal := time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)
	fire := time.Date(2026, 3, 1, 11, 59, 58, 125_000_000, time.UTC)
	srv := newTarget(t, status(503))
	c, fake := newTestClient(t, nil)
	req := httpRequest(srv.URL, func(h *registryv1.HttpTarget) {
		h.Body = `{"slot":"{{nominal_time}}","attempt":{{ attempt }},"kind":"{{trigger_kind}}","literal":"{{{{x}}"}`
		h.BodyFormat = registryv1.BodyFormat_BODY_FORMAT_TEMPLATE
		h.Headers = map[string]string{"X-Custom": "one", "Cronmesh-Attempt": "99"} // the registry refuses the latter
	})
	req.JobId = jobID
	req.ExecutionId = execid.For(jobID, nominal)
	req.NominalTime = timestamppb.New(nominal)
	req.FireTime = timestamppb.New(fire)
	req.TriggerKind = dispatchv1.TriggerKind_TRIGGER_KIND_CATCH_UP

	for attempt := int32(1); attempt <= 2; attempt++ {
		req.Attempt = attempt
		out := deliverNow(c, context.Background(), req)
		require.Equal(t, Retryable, out.Result, out.Reason)
		got := <-srv.reqs

		require.Equal(t, map[string][]string{
			"Cronmesh-Nominal-Time": {"2026-03-01T03:00:00Z"},
			"Cronmesh-Fire-Time":    {"2026-03-01T11:59:58.125Z"},
			"Cronmesh-Attempt":      {strconv.Itoa(int(attempt))},
			"Cronmesh-Job-Id":       {jobID},
			"Cronmesh-Execution-Id": {req.ExecutionId},
			"Cronmesh-Trigger-Kind": {"catch-up"},
		}, cronmeshHeaders(got.header), "attempt %d", attempt)
		require.Equal(t, "one", got.header.Get("X-Custom"))
		require.Equal(t, fmt.Sprintf(`{"slot":"2026-03-01T03:00:00Z","attempt":%d,"kind":"catch-up","literal":"{{x}}"}`, attempt), string(got.body))
		require.Equal(t, "application/json", got.header.Get("Content-Type"))

		// The receiver's checks: the signature covers the rendered body,
		// and the signed webhook-id vouches for the job and nominal time.
		require.NoError(t, webhooksign.Verify(vectorSecret, got.header, got.body, 0, fake.Now()))
		require.NoError(t, webhooksign.VerifySlot(got.header))
		forged := got.header.Clone()
		forged.Set("Cronmesh-Nominal-Time", "2026-03-01T04:00:00Z")
		require.ErrorIs(t, webhooksign.VerifySlot(forged), webhooksign.ErrSlotMismatch)
		require.ErrorIs(t, webhooksign.Verify(vectorSecret, got.header, []byte(`{"slot":"2026-03-01T04:00:00Z"}`), 0, fake.Now()),
			webhooksign.ErrNoMatchingSignature, "a body of another slot does not verify")
	}

	t.Run("a literal body with placeholders is sent as written", func(t *testing.T) {
		literal := httpRequest(srv.URL, func(h *registryv1.HttpTarget) { h.Body = `{"a":"{{nominal_time}}"}` })
		deliverNow(c, context.Background(), literal)
		require.Equal(t, `{"a":"{{nominal_time}}"}`, string((<-srv.reqs).body))
	})
	t.Run("a broken template that bypassed the registry is permanent", func(t *testing.T) {
		broken := httpRequest(srv.URL, func(h *registryv1.HttpTarget) {
			h.Body, h.BodyFormat = `{{nope}}`, registryv1.BodyFormat_BODY_FORMAT_TEMPLATE
		})
		out := deliverNow(c, context.Background(), broken)
		require.Equal(t, Permanent, out.Result)
		require.Contains(t, out.Reason, `invalid body template: template error at byte 0: unknown placeholder "nope"`)
	})
	t.Run("a text template is not JSON-escaped", func(t *testing.T) {
		text := httpRequest(srv.URL, func(h *registryv1.HttpTarget) {
			h.Body, h.BodyFormat = `ns={{namespace}}`, registryv1.BodyFormat_BODY_FORMAT_TEMPLATE
			h.Headers = map[string]string{"content-type": "text/plain"}
		})
		text.Namespace = `al"pha`
		deliverNow(c, context.Background(), text)
		require.Equal(t, `ns=al"pha`, string((<-srv.reqs).body))
	})
}

// cronmeshHeaders is the cronmesh-* part of h.
func cronmeshHeaders(h http.Header) map[string][]string {
	out := map[string][]string{}
	for k, v := range h {
		if strings.HasPrefix(k, "Cronmesh-") {
			out[k] = v
		}
	}
	return out
}

// deliverNow prepares an attempt of req and makes it at once, both in ctx.
func deliverNow(c *Client, ctx context.Context, req *dispatchv1.DispatchRequest) Outcome {
	return c.Prepare(ctx, req).Make(ctx)
}
