package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthv1 "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/keyring"
	"github.com/cronmesh/cronmesh/libs/ratelimit"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/telemetry"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
)

const (
	testService   = "cronmesh.test.v1.TestService"
	testPath      = "/" + testService + "/"
	echoProcedure = testPath + "Echo"
)

// echoService is a test-only Connect service: Echo returns its input, except
// "panic" panics and "block" waits for release (after signalling entered).
type echoService struct {
	entered chan struct{}
	release chan struct{}
}

func newEchoService() *echoService {
	return &echoService{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (e *echoService) handler(opts ...connect.HandlerOption) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(echoProcedure, connect.NewUnaryHandler(echoProcedure,
		func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			switch req.Msg.GetValue() {
			case "panic":
				panic("secret detail that must not leak")
			case "block":
				e.entered <- struct{}{}
				select {
				case <-e.release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return connect.NewResponse(wrapperspb.String(req.Msg.GetValue())), nil
		}, opts...))
	return mux
}

// logWatcher is a slog.Handler that lets a test wait for one of the messages
// given to newLogWatcher (the map is fixed after construction).
type logWatcher struct {
	mu      sync.Mutex
	waiting map[string]chan struct{}
	closed  map[string]bool
}

func newLogWatcher(msgs ...string) *logWatcher {
	w := &logWatcher{waiting: map[string]chan struct{}{}, closed: map[string]bool{}}
	for _, m := range msgs {
		w.waiting[m] = make(chan struct{})
	}
	return w
}

func (w *logWatcher) seen(msg string) <-chan struct{} { return w.waiting[msg] }

func (w *logWatcher) Enabled(context.Context, slog.Level) bool { return true }
func (w *logWatcher) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *logWatcher) WithGroup(string) slog.Handler            { return w }
func (w *logWatcher) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.waiting[r.Message]; ok && !w.closed[r.Message] {
		close(ch)
		w.closed[r.Message] = true
	}
	return nil
}

type fixture struct {
	srv    *server.Server
	echo   *echoService
	tel    *telemetry.Telemetry
	spans  *tracetest.InMemoryExporter
	logs   *logWatcher
	url    string
	h2c    *http.Client
	cancel context.CancelFunc
	done   chan error
}

// start runs a server on 127.0.0.1:0 with the echo service mounted;
// configure runs before Run (to add middleware, for example).
func start(t *testing.T, configure func(*server.Server)) *fixture {
	t.Helper()
	return startWith(t, server.Options{}, configure)
}

// startWith is start with opts' RateLimit, Clock and Limits.
func startWith(t *testing.T, opts server.Options, configure func(*server.Server)) *fixture {
	t.Helper()
	f := &fixture{
		echo:  newEchoService(),
		spans: tracetest.NewInMemoryExporter(),
		logs:  newLogWatcher("draining in-flight requests"),
		done:  make(chan error, 1),
	}
	var err error
	f.tel, err = telemetry.Setup(t.Context(), telemetry.Options{ServiceName: "test", SpanExporter: f.spans})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.tel.Shutdown(context.Background()) })
	f.srv, err = server.New(server.Options{
		Name:            "test",
		Listen:          "127.0.0.1:0",
		Logger:          slog.New(f.logs),
		Telemetry:       f.tel,
		ShutdownTimeout: time.Minute,
		RateLimit:       opts.RateLimit,
		Clock:           opts.Clock,
		Limits:          opts.Limits,
	})
	require.NoError(t, err)
	f.srv.Handle(testService, testPath, f.echo.handler(f.srv.HandlerOptions()...))
	if configure != nil {
		configure(f.srv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() { f.done <- f.srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-f.done)
	})
	select {
	case <-f.srv.Ready():
	case err := <-f.done:
		t.Fatalf("Run failed before listening: %v", err)
	}
	f.url = "http://" + f.srv.Addr()
	f.h2c = rpctest.H2CClient()
	// Runs before the shutdown above (cleanups are LIFO): idle HTTP/2
	// connections would otherwise make shutdown wait for the server's
	// one-second GOAWAY grace period.
	t.Cleanup(f.h2c.CloseIdleConnections)
	return f
}

func (f *fixture) echoClient(opts ...connect.ClientOption) *connect.Client[wrapperspb.StringValue, wrapperspb.StringValue] {
	return connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](f.h2c, f.url+echoProcedure, opts...)
}

func (f *fixture) healthCheck(ctx context.Context, service string) (healthv1.HealthCheckResponse_ServingStatus, error) {
	c := connect.NewClient[healthv1.HealthCheckRequest, healthv1.HealthCheckResponse](
		f.h2c, f.url+"/grpc.health.v1.Health/Check", connect.WithGRPC())
	res, err := c.CallUnary(ctx, connect.NewRequest(&healthv1.HealthCheckRequest{Service: service}))
	if err != nil {
		return 0, err
	}
	return res.Msg.GetStatus(), nil
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body)
}

func TestNew(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    server.Options
		wantErr string
	}{
		{name: "ok, defaults", opts: server.Options{Name: "x", Listen: "127.0.0.1:0"}},
		{name: "no name", opts: server.Options{Listen: ":0"}, wantErr: "Name"},
		{name: "no listen", opts: server.Options{Name: "x"}, wantErr: "Listen"},
		{name: "negative limit", opts: server.Options{Name: "x", Listen: ":0", Limits: server.Limits{ReadTimeout: -time.Second}}, wantErr: "negative"},
		{name: "write timeout under read timeout", opts: server.Options{Name: "x", Listen: ":0", Limits: server.Limits{ReadTimeout: 5 * time.Minute}}, wantErr: "write timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := server.New(tt.opts)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Empty(t, s.Addr())
		})
	}
}

func TestSharedTelemetry(t *testing.T) {
	t.Parallel()
	tel, err := telemetry.Setup(t.Context(), telemetry.Options{ServiceName: "x"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	for range 2 {
		_, err := server.New(server.Options{Name: "x", Listen: ":0", Telemetry: tel})
		require.NoError(t, err)
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	f := start(t, nil)
	ctx := t.Context()
	steps := []struct {
		serving *bool
		want    healthv1.HealthCheckResponse_ServingStatus
		ready   int
	}{
		{want: healthv1.HealthCheckResponse_NOT_SERVING, ready: http.StatusServiceUnavailable},
		{serving: new(true), want: healthv1.HealthCheckResponse_SERVING, ready: http.StatusOK},
		{serving: new(true), want: healthv1.HealthCheckResponse_SERVING, ready: http.StatusOK},
		{serving: new(false), want: healthv1.HealthCheckResponse_NOT_SERVING, ready: http.StatusServiceUnavailable},
	}
	for i, step := range steps {
		if step.serving != nil {
			f.srv.SetServing(*step.serving)
		}
		for _, svc := range []string{"", testService} {
			got, err := f.healthCheck(ctx, svc)
			require.NoError(t, err, "step %d service %q", i, svc)
			require.Equal(t, step.want, got, "step %d service %q", i, svc)
		}
		code, _ := get(t, f.url+"/readyz")
		require.Equal(t, step.ready, code, "step %d", i)
		code, _ = get(t, f.url+"/healthz")
		require.Equal(t, http.StatusOK, code, "liveness is independent of readiness")
	}

	_, err := f.healthCheck(ctx, "no.such.Service")
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))

	// A service mounted while serving is serving too.
	f.srv.SetServing(true)
	f.srv.Handle("cronmesh.test.v1.Late", "/cronmesh.test.v1.Late/", http.NotFoundHandler())
	got, err := f.healthCheck(ctx, "cronmesh.test.v1.Late")
	require.NoError(t, err)
	require.Equal(t, healthv1.HealthCheckResponse_SERVING, got)
}

func TestReflection(t *testing.T) {
	t.Parallel()
	f := start(t, nil)
	conn, err := grpc.NewClient(f.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	stream, err := reflectionv1.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
	require.NoError(t, err)

	require.NoError(t, stream.Send(&reflectionv1.ServerReflectionRequest{
		MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{},
	}))
	res, err := stream.Recv()
	require.NoError(t, err)
	var names []string
	for _, s := range res.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	require.ElementsMatch(t, []string{
		testService,
		grpchealth.HealthV1ServiceName,
		grpcreflect.ReflectV1ServiceName,
		grpcreflect.ReflectV1AlphaServiceName,
	}, names)

	// grpcurl describe needs the descriptors, not just the names.
	require.NoError(t, stream.Send(&reflectionv1.ServerReflectionRequest{
		MessageRequest: &reflectionv1.ServerReflectionRequest_FileContainingSymbol{
			FileContainingSymbol: grpchealth.HealthV1ServiceName,
		},
	}))
	res, err = stream.Recv()
	require.NoError(t, err)
	require.Nil(t, res.GetErrorResponse())
	require.NotEmpty(t, res.GetFileDescriptorResponse().GetFileDescriptorProto())
	require.NoError(t, stream.CloseSend())
}

func TestProtocols(t *testing.T) {
	t.Parallel()
	f := start(t, nil)
	tests := []struct {
		name   string
		client *http.Client
		opts   []connect.ClientOption
	}{
		{name: "connect over HTTP/1.1", client: http.DefaultClient},
		{name: "connect json over HTTP/1.1", client: http.DefaultClient, opts: []connect.ClientOption{connect.WithProtoJSON()}},
		{name: "grpc over h2c", client: f.h2c, opts: []connect.ClientOption{connect.WithGRPC()}},
		{name: "grpc-web over HTTP/1.1", client: http.DefaultClient, opts: []connect.ClientOption{connect.WithGRPCWeb()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](tt.client, f.url+echoProcedure, tt.opts...)
			res, err := c.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("hi")))
			require.NoError(t, err)
			require.Equal(t, "hi", res.Msg.GetValue())
		})
	}
}

func TestPanicAndMetrics(t *testing.T) {
	t.Parallel()
	f := start(t, nil)
	c := f.echoClient(connect.WithGRPC())
	_, err := c.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("hello")))
	require.NoError(t, err)
	_, err = c.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("panic")))
	require.Equal(t, connect.CodeInternal, connect.CodeOf(err))
	require.NotContains(t, err.Error(), "secret")

	code, body := get(t, f.url+"/metrics")
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{
		fmt.Sprintf(`rpc_server_requests_total{code="ok",procedure=%q} 1`, echoProcedure),
		fmt.Sprintf(`rpc_server_requests_total{code="internal",procedure=%q} 1`, echoProcedure),
		fmt.Sprintf(`rpc_server_request_duration_seconds_count{procedure=%q} 2`, echoProcedure),
		"go_goroutines",
	} {
		require.Contains(t, body, want)
	}
}

func TestMiddleware(t *testing.T) {
	t.Parallel()
	var order []string
	var mu sync.Mutex
	tag := func(name string) func(http.Handler) http.Handler {
		return func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				next.ServeHTTP(w, r)
			})
		}
	}
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer secret" {
				http.Error(w, "unauthenticated", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	f := start(t, func(s *server.Server) {
		s.UseMiddleware(tag("outer"))
		s.UseMiddleware(auth)
		s.UseMiddleware(tag("inner"))
		s.HandleHTTP("GET /extra", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("extra"))
		}))
	})
	f.srv.SetServing(true)

	c := f.echoClient(connect.WithGRPC())
	_, err := c.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("x")))
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err))

	req := connect.NewRequest(wrapperspb.String("x"))
	req.Header().Set("Authorization", "Bearer secret")
	_, err = c.CallUnary(t.Context(), req)
	require.NoError(t, err)
	mu.Lock()
	require.Equal(t, []string{"outer", "outer", "inner"}, order, "first middleware is outermost")
	mu.Unlock()

	// Health, reflection, probes and metrics work without credentials.
	status, err := f.healthCheck(t.Context(), testService)
	require.NoError(t, err)
	require.Equal(t, healthv1.HealthCheckResponse_SERVING, status)
	stream := grpcreflect.NewClient(f.h2c, f.url, connect.WithGRPC()).NewStream(t.Context())
	names, err := stream.ListServices()
	_, _ = stream.Close() // an open stream would hold up graceful shutdown
	require.NoError(t, err)
	require.Contains(t, names, protoreflect.FullName(testService))
	for _, path := range []string{"/metrics", "/healthz", "/readyz", "/extra"} {
		code, _ := get(t, f.url+path)
		require.Equal(t, http.StatusOK, code, path)
	}
	mu.Lock()
	require.Len(t, order, 3, "middleware ran only for the service calls")
	mu.Unlock()
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	const key = "alpha-key-0123456789abcdef"
	keys, err := keyring.Config{}.NewRegistryRing([]string{"alpha=" + key}, nil, nil, nil)
	require.NoError(t, err)
	clk := clock.NewFake(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	f := startWith(t, server.Options{
		RateLimit: ratelimit.Config{Default: ratelimit.Rate{PerSecond: 1, Burst: 2}},
		Clock:     clk,
	}, func(s *server.Server) { s.UseMiddleware(keys.Middleware().Wrap) })
	f.srv.SetServing(true)

	c := f.echoClient(connect.WithGRPC())
	call := func() error {
		req := connect.NewRequest(wrapperspb.String("x"))
		req.Header().Set("Authorization", "Bearer "+key)
		_, err := c.CallUnary(t.Context(), req)
		return err
	}
	require.NoError(t, call())
	require.NoError(t, call())
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(call()), "the third call of a burst of two")
	clk.Advance(time.Second)
	require.NoError(t, call(), "a token a second later")

	// Probes are not limited.
	for range 5 {
		_, err := f.healthCheck(t.Context(), "")
		require.NoError(t, err)
	}
	_, body := get(t, f.url+"/metrics")
	for _, want := range []string{
		`quota_refusals_total{namespace="alpha",quota="requests_per_second"} 1`,
		fmt.Sprintf(`rpc_server_requests_total{code="resource_exhausted",procedure=%q} 1`, echoProcedure),
	} {
		require.Contains(t, body, want)
	}
}

func TestTraceJoinsCaller(t *testing.T) {
	t.Parallel()
	f := start(t, nil)
	const (
		traceID = "0af7651916cd43dd8448eb211c80319c"
		spanID  = "b7ad6b7169203331"
	)
	tests := []struct {
		name string
		opts []connect.ClientOption
	}{
		{name: "grpc", opts: []connect.ClientOption{connect.WithGRPC()}},
		{name: "connect"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := connect.NewRequest(wrapperspb.String(tt.name))
			req.Header().Set("traceparent", "00-"+traceID+"-"+spanID+"-01")
			_, err := f.echoClient(tt.opts...).CallUnary(t.Context(), req)
			require.NoError(t, err)
			// The server span ends before the response is written, so a
			// flush now sees it.
			require.NoError(t, f.tel.ForceFlush(t.Context()))
			spans := f.spans.GetSpans()
			f.spans.Reset()
			require.Len(t, spans, 1)
			s := spans[0]
			require.Equal(t, strings.TrimPrefix(echoProcedure, "/"), s.Name)
			require.Equal(t, trace.SpanKindServer, s.SpanKind)
			require.Equal(t, traceID, s.SpanContext.TraceID().String(), "server span joins the caller's trace")
			require.Equal(t, spanID, s.Parent.SpanID().String(), "server span is a child of the caller's span")
			require.True(t, s.Parent.IsRemote())
			require.Empty(t, s.Links, "a child, not a link")
		})
	}
}

func TestClientOptionsPropagate(t *testing.T) {
	t.Parallel()
	f := start(t, nil)
	ctx, parent := f.tel.Tracer("test").Start(t.Context(), "caller")
	opts := append([]connect.ClientOption{connect.WithGRPC()}, f.srv.ClientOptions()...)
	_, err := f.echoClient(opts...).CallUnary(ctx, connect.NewRequest(wrapperspb.String("x")))
	require.NoError(t, err)
	parent.End()
	require.NoError(t, f.tel.ForceFlush(t.Context()))

	byKind := map[trace.SpanKind]tracetest.SpanStub{}
	for _, s := range f.spans.GetSpans() {
		require.Equal(t, parent.SpanContext().TraceID(), s.SpanContext.TraceID(), "one trace: %s", s.Name)
		byKind[s.SpanKind] = s
	}
	require.Len(t, byKind, 3) // internal (caller), client, server
	require.Equal(t, parent.SpanContext().SpanID(), byKind[trace.SpanKindClient].Parent.SpanID())
	require.Equal(t, byKind[trace.SpanKindClient].SpanContext.SpanID(), byKind[trace.SpanKindServer].Parent.SpanID())
}

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	f := start(t, nil)
	f.srv.SetServing(true)
	type result struct {
		res *connect.Response[wrapperspb.StringValue]
		err error
	}
	results := make(chan result, 1)
	go func() {
		res, err := f.echoClient(connect.WithGRPC()).CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("block")))
		results <- result{res, err}
	}()
	<-f.echo.entered

	f.cancel()
	// Logged by http.Server.Shutdown once the listener is closed.
	<-f.logs.seen("draining in-flight requests")
	select {
	case err := <-f.done:
		t.Fatalf("Run returned %v with a request in flight", err)
	default:
	}
	// The listener is closed: new connections are refused.
	_, err := net.Dial("tcp", f.srv.Addr())
	require.Error(t, err)

	close(f.echo.release)
	r := <-results
	require.NoError(t, r.err)
	require.Equal(t, "block", r.res.Msg.GetValue())
	err = <-f.done
	require.NoError(t, err)
	f.done <- err // for the cleanup in start
}

func TestShutdownTimeout(t *testing.T) {
	t.Parallel()
	echo := newEchoService()
	s, err := server.New(server.Options{Name: "t", Listen: "127.0.0.1:0", ShutdownTimeout: time.Nanosecond})
	require.NoError(t, err)
	s.Handle(testService, testPath, echo.handler(s.HandlerOptions()...))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-s.Ready()
	results := make(chan error, 1)
	go func() {
		c := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](rpctest.H2CClient(), "http://"+s.Addr()+echoProcedure, connect.WithGRPC())
		_, err := c.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("block")))
		results <- err
	}()
	<-echo.entered
	cancel()
	require.ErrorIs(t, <-done, context.DeadlineExceeded)
	require.Error(t, <-results, "the in-flight request is cut off")
	close(echo.release)
}

func TestRunLifecycle(t *testing.T) {
	t.Parallel()
	t.Run("stop before run", func(t *testing.T) {
		t.Parallel()
		s, err := server.New(server.Options{Name: "t", Listen: "127.0.0.1:0"})
		require.NoError(t, err)
		s.Stop()
		s.Stop()
		require.NoError(t, s.Run(t.Context()))
		require.Error(t, s.Run(t.Context()), "Run twice")
	})
	t.Run("stop while running", func(t *testing.T) {
		t.Parallel()
		s, err := server.New(server.Options{Name: "t", Listen: "127.0.0.1:0"})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- s.Run(t.Context()) }()
		<-s.Ready()
		require.NotEmpty(t, s.Addr())
		s.Stop()
		s.Stop()
		require.NoError(t, <-done)
	})
	t.Run("listen fails", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = ln.Close() })
		s, err := server.New(server.Options{Name: "t", Listen: ln.Addr().String()})
		require.NoError(t, err)
		err = s.Run(t.Context())
		require.ErrorContains(t, err, ln.Addr().String())
		var opErr *net.OpError
		require.True(t, errors.As(err, &opErr))
		select {
		case <-s.Ready():
			t.Fatal("Ready closed although listening failed")
		default:
		}
		require.Empty(t, s.Addr())
	})
}

// TestSmallResponsesAreNotCompressed: a caller that accepts gzip gets a
// large response compressed and a small one as it is, which would cost
// more to compress than it saves.
func TestSmallResponsesAreNotCompressed(t *testing.T) {
	t.Parallel()
	f := start(t, nil)
	encoding := func(value string) string {
		t.Helper()
		body, err := proto.Marshal(wrapperspb.String(value))
		require.NoError(t, err)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url+echoProcedure, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/proto")
		// Set by hand, so the client neither adds nor undoes it.
		req.Header.Set("Accept-Encoding", "gzip")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		_, err = io.Copy(io.Discard, res.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode)
		return res.Header.Get("Content-Encoding")
	}
	require.Empty(t, encoding("a job's worth of bytes"), "a small response is sent as it is")
	require.Equal(t, "gzip", encoding(strings.Repeat("a page of jobs ", 200)), "a large one is compressed")
}
