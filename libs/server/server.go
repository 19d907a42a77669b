package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"connectrpc.com/otelconnect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/quota"
	"github.com/cronmesh/cronmesh/libs/ratelimit"
	"github.com/cronmesh/cronmesh/libs/telemetry"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

const (
	// DefaultShutdownTimeout bounds graceful shutdown when Options leave it 0.
	DefaultShutdownTimeout = 15 * time.Second
	// readHeaderTimeout stops slow-loris clients from holding connections
	// open with headers that never end; Limits.ReadTimeout bounds the body.
	readHeaderTimeout = 10 * time.Second
)

// Options configure a Server.
type Options struct {
	// Name is the service name for logs, e.g. "registry"; required.
	Name string
	// Listen is the host:port to listen on; required. Port 0 picks a free
	// port, reported by Addr once Ready is closed.
	Listen string
	// Logger receives start/stop, readiness and panic logs. Nil discards.
	Logger *slog.Logger
	// Telemetry provides the tracer provider, propagator and metrics
	// registry. Nil means no tracing (a no-op tracer provider) and metrics
	// on a private registry, still served on /metrics.
	Telemetry *telemetry.Telemetry
	// ShutdownTimeout bounds graceful shutdown; 0 means
	// DefaultShutdownTimeout. In-flight requests still running when it
	// expires are cut off.
	ShutdownTimeout time.Duration
	// Profiling serves net/http/pprof under /debug/pprof/. Off by default:
	// profiles reveal internals and cost CPU, so an operator turns them on
	// (--pprof) for a benchmark or an investigation.
	Profiling bool
	// RateLimit limits each API key's calls to the services mounted with
	// Handle (config.Common.RateLimit); the zero value limits nothing.
	// Refusals are counted in quota_refusals_total on the Telemetry
	// registry.
	RateLimit ratelimit.Config
	// Clock drives the rate limit's token buckets; nil means the system
	// clock.
	Clock clock.Clock
	// TLS, when it names a certificate and key, makes the listener serve
	// HTTP/2 and HTTP/1.1 over TLS (negotiated by ALPN) instead of HTTP/1.1
	// and h2c. With a client CA as well, every request but the probes
	// (/healthz, /readyz) needs a client certificate that chains to it; see
	// requireClientCert. The zero value serves without TLS.
	TLS tlsconfig.Server
	// Limits bound the size of requests and how long reading and answering
	// them may take; zero fields take their defaults.
	Limits Limits
}

// Server serves a service's Connect handlers plus health, reflection and
// metrics on one listener. Build it with New; the zero value is not usable.
type Server struct {
	name            string
	listen          string
	logger          *slog.Logger
	shutdownTimeout time.Duration
	limits          Limits // defaults filled

	mux      *http.ServeMux // everything served
	handler  http.Handler   // mux, behind the client certificate check of mutual TLS
	tls      *tls.Config    // nil: no TLS
	services *http.ServeMux // only the Connect services, behind middleware
	// wrapped is services behind the middleware chain; swapped atomically so
	// UseMiddleware and requests never race.
	wrapped atomic.Pointer[http.Handler]
	checker *grpchealth.StaticChecker
	serving atomic.Bool
	otel    *otelconnect.Interceptor
	metrics *metricsInterceptor
	// rateLimits is the rate limit interceptor, or nil when nothing is
	// limited.
	rateLimits []connect.Interceptor

	mu         sync.Mutex
	names      []string // fully-qualified names of handled services
	middleware []func(http.Handler) http.Handler
	started    bool

	addr     atomic.Pointer[string]
	ready    chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
}

// New builds a Server from opts, filling defaults. It fails when Name or
// Listen is empty, or when the request metrics cannot be registered on the
// Telemetry registry (a different collector already owns their names).
// Several Servers may share one Telemetry: they then share the request
// metrics.
func New(opts Options) (*Server, error) {
	if opts.Name == "" {
		return nil, errors.New("server: Name is required")
	}
	if opts.Listen == "" {
		return nil, fmt.Errorf("server %s: Listen is required", opts.Name)
	}
	tel := opts.Telemetry
	if tel == nil {
		tel = &telemetry.Telemetry{}
	}
	// Copy so defaults filled here never mutate the caller's Telemetry.
	tel = &telemetry.Telemetry{
		TracerProvider: cmp.Or(tel.TracerProvider, trace.TracerProvider(noop.NewTracerProvider())),
		Propagator: cmp.Or(tel.Propagator, propagation.TextMapPropagator(
			propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))),
		Metrics: cmp.Or(tel.Metrics, prometheus.NewRegistry()),
	}
	otelIC, err := otelconnect.NewInterceptor(
		otelconnect.WithTracerProvider(tel.TracerProvider),
		otelconnect.WithPropagator(tel.Propagator),
		// Without this, server spans start a new trace with only a link to
		// the caller; inside the mesh every caller is ours, so join its trace.
		otelconnect.WithTrustRemote(),
		// Metrics come from our Prometheus interceptor; otelconnect's would
		// go to the global OpenTelemetry meter provider.
		otelconnect.WithoutMetrics(),
	)
	if err != nil {
		return nil, fmt.Errorf("server %s: otelconnect interceptor: %w", opts.Name, err)
	}
	metrics, err := newMetricsInterceptor(tel.Metrics)
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", opts.Name, err)
	}
	limits, err := opts.Limits.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", opts.Name, err)
	}
	var rateLimits []connect.Interceptor
	if !opts.RateLimit.Unlimited() {
		refusals, err := quota.NewRefusals(tel.Metrics)
		if err != nil {
			return nil, fmt.Errorf("server %s: %w", opts.Name, err)
		}
		limiter, err := ratelimit.New(opts.RateLimit, ratelimit.Options{Clock: opts.Clock, Refusals: refusals})
		if err != nil {
			return nil, fmt.Errorf("server %s: rate limit: %w", opts.Name, err)
		}
		rateLimits = append(rateLimits, limiter.Interceptor())
	}
	s := &Server{
		name:            opts.Name,
		listen:          opts.Listen,
		logger:          cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		shutdownTimeout: cmp.Or(opts.ShutdownTimeout, DefaultShutdownTimeout),
		mux:             http.NewServeMux(),
		services:        http.NewServeMux(),
		checker:         grpchealth.NewStaticChecker(),
		otel:            otelIC,
		metrics:         metrics,
		limits:          limits,
		rateLimits:      rateLimits,
		ready:           make(chan struct{}),
		stop:            make(chan struct{}),
	}
	// The process as a whole starts NOT_SERVING: a service is ready only
	// once its dependencies are (db pinged, consumers subscribed).
	s.checker.SetStatus("", grpchealth.StatusNotServing)
	if s.tls, s.handler, err = tlsHandler(opts.TLS, s.mux); err != nil {
		return nil, fmt.Errorf("server %s: TLS: %w", opts.Name, err)
	}
	var services http.Handler = s.services
	s.wrapped.Store(&services)

	// Health and reflection answer without credentials, so they get small
	// fixed limits of their own rather than MaxRequestBytes.
	s.mux.Handle(grpchealth.NewHandler(s.checker, connect.WithReadMaxBytes(healthMaxBytes)))
	reflector := grpcreflect.NewReflector(grpcreflect.NamerFunc(s.reflectionNames))
	s.mux.Handle(grpcreflect.NewHandlerV1(reflector, connect.WithReadMaxBytes(reflectionMaxBytes)))
	s.mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, connect.WithReadMaxBytes(reflectionMaxBytes)))
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(tel.Metrics, promhttp.HandlerOpts{}))
	if opts.Profiling {
		s.mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		s.mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		s.mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		s.mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		s.mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.serving.Load() {
			http.Error(w, "not serving", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return s, nil
}

// compressMinBytes is the smallest response a handler compresses when the
// caller accepts gzip. Connect compresses every response by default, and
// the pooled gzip writer's reset alone costs the same whatever the size: at
// 500 CreateJob calls/s, 8 % of the registry's CPU went to compressing
// single jobs, which gain nothing from it on the way back.
const compressMinBytes = 1 << 10

// HandlerOptions returns the Connect handler options every service must pass
// to its generated NewXxxServiceHandler: the read limit of
// Limits.MaxRequestBytes on each decompressed message (RESOURCE_EXHAUSTED
// beyond it), responses compressed only from compressMinBytes on,
// OpenTelemetry tracing (server spans join the caller's trace
// from its traceparent header), Prometheus request metrics, panic recovery
// that logs the panic with its stack and returns CodeInternal without
// leaking details, extra interceptors, then the per-key rate limit of
// Options.RateLimit, in that order from outermost to innermost. Refused
// calls are thus traced and counted by code like any other; panics in extra
// interceptors are recovered too. The rate limit is innermost so that it
// sees the caller's key even when an extra interceptor is what
// authenticates it.
func (s *Server) HandlerOptions(extra ...connect.Interceptor) []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithReadMaxBytes(s.limits.MaxRequestBytes),
		connect.WithCompressMinBytes(compressMinBytes),
		connect.WithInterceptors(s.otel, s.metrics),
		connect.WithRecover(s.recoverPanic),
		connect.WithInterceptors(extra...),
		connect.WithInterceptors(s.rateLimits...),
	}
}

// ClientOptions returns the Connect client options for calling other cronmesh
// services from this one: the same OpenTelemetry interceptor, in its client
// role, so each call gets a client span and sends traceparent, and the callee's
// server span joins this trace. Without them a call starts a new trace.
func (s *Server) ClientOptions() []connect.ClientOption {
	return []connect.ClientOption{connect.WithInterceptors(s.otel)}
}

func (s *Server) recoverPanic(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
	s.logger.ErrorContext(ctx, "panic in handler",
		"procedure", spec.Procedure, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	return connect.NewError(connect.CodeInternal, errors.New("internal error"))
}

// Handle mounts a Connect service: path and h as returned by the generated
// NewXxxServiceHandler, serviceName its fully-qualified name (the generated
// XxxServiceName constant). The service is listed by reflection and gets a
// health status matching the current SetServing state. It is served behind the
// middleware of UseMiddleware. A path already mounted panics, as with
// http.ServeMux. Safe to call concurrently with requests, though services are
// normally mounted before Run.
func (s *Server) Handle(serviceName, path string, h http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.services.Handle(path, h)
	s.mux.Handle(path, http.HandlerFunc(s.serveService))
	s.names = append(s.names, serviceName)
	s.checker.SetStatus(serviceName, healthStatus(s.serving.Load()))
}

func (s *Server) serveService(w http.ResponseWriter, r *http.Request) {
	(*s.wrapped.Load()).ServeHTTP(w, r)
}

// HandleHTTP mounts a plain HTTP handler on pattern (http.ServeMux syntax),
// NOT behind the middleware: it is for extras such as webhooks or debug pages
// that do their own access control. A conflicting pattern panics, as with
// http.ServeMux.
func (s *Server) HandleHTTP(pattern string, h http.Handler) {
	s.mux.Handle(pattern, h)
}

// UseMiddleware wraps the Connect services mounted with Handle (only them:
// not health, reflection, /metrics, /healthz, /readyz nor HandleHTTP
// handlers) in mw, typically authentication. The first middleware added is
// the outermost. It applies to services mounted before and after the call;
// call it before Run.
func (s *Server) UseMiddleware(mw func(http.Handler) http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.middleware = append(s.middleware, mw)
	var h http.Handler = s.services
	for _, m := range slices.Backward(s.middleware) {
		h = m(h)
	}
	s.wrapped.Store(&h)
}

// SetServing flips the grpc.health.v1 status of "" (the whole server) and of
// every handled service to SERVING (true) or NOT_SERVING (false), and /readyz
// with it. A Server starts NOT_SERVING; Run sets NOT_SERVING again when
// shutting down. Repeating the current state is a no-op.
func (s *Server) SetServing(serving bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving.Swap(serving) == serving {
		return
	}
	status := healthStatus(serving)
	s.checker.SetStatus("", status)
	for _, name := range s.names {
		s.checker.SetStatus(name, status)
	}
	s.logger.Info("health status changed", "server", s.name, "status", status.String())
}

func healthStatus(serving bool) grpchealth.Status {
	if serving {
		return grpchealth.StatusServing
	}
	return grpchealth.StatusNotServing
}

// reflectionNames lists what reflection advertises: the handled services plus
// the built-in health and reflection services, sorted for stable output.
func (s *Server) reflectionNames() []string {
	s.mu.Lock()
	names := slices.Clone(s.names)
	s.mu.Unlock()
	names = append(names,
		grpchealth.HealthV1ServiceName,
		grpcreflect.ReflectV1ServiceName,
		grpcreflect.ReflectV1AlphaServiceName,
	)
	slices.Sort(names)
	return slices.Compact(names)
}

// Run listens and serves until ctx is done or Stop is called, then shuts
// down gracefully: health goes NOT_SERVING first, the listener closes, and
// in-flight requests get up to ShutdownTimeout to finish before their
// connections are closed (an error is returned then). It returns nil on a
// clean shutdown, and an error if listening fails, if serving fails, or if Run
// was already called. Once listening, Ready is closed and Addr reports the
// bound address.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return fmt.Errorf("server %s: Run called twice", s.name)
	}
	s.started = true
	s.mu.Unlock()

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.listen)
	if err != nil {
		return fmt.Errorf("server %s: listen on %s: %w", s.name, s.listen, err)
	}
	addr := ln.Addr().String()
	s.addr.Store(&addr)
	close(s.ready)

	var protocols http.Protocols
	protocols.SetHTTP1(true)
	// gRPC needs HTTP/2: over TLS when configured, else h2c.
	protocols.SetHTTP2(s.tls != nil)
	protocols.SetUnencryptedHTTP2(s.tls == nil)
	srv := &http.Server{
		Handler:           boundBodies(s.handler, s.bodyLimit),
		Protocols:         &protocols,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       s.limits.ReadTimeout,
		WriteTimeout:      s.limits.WriteTimeout,
		IdleTimeout:       s.limits.IdleTimeout,
		MaxHeaderBytes:    s.limits.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
		// Request contexts keep ctx's values but not its cancellation: when
		// ctx is cancelled in-flight requests must be allowed to finish.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	srv.RegisterOnShutdown(func() {
		// Runs once the listener is closed and shutdown is under way.
		s.logger.Info("draining in-flight requests", "server", s.name)
	})

	serveErr := make(chan error, 1)
	go func() { serveErr <- s.serve(srv, ln) }()
	s.logger.Info("server started", "server", s.name, "addr", addr, "tls", s.tls != nil)

	select {
	case err := <-serveErr:
		s.SetServing(false)
		return fmt.Errorf("server %s: serve: %w", s.name, err)
	case <-ctx.Done():
	case <-s.stop:
	}

	s.SetServing(false)
	s.logger.Info("server shutting down", "server", s.name, "timeout", s.shutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	<-serveErr // http.ErrServerClosed, returned as soon as Shutdown starts
	if err != nil {
		closeErr := srv.Close()
		s.logger.Error("server stopped without draining", "server", s.name, "error", err)
		return errors.Join(fmt.Errorf("server %s: graceful shutdown: %w", s.name, err), closeErr)
	}
	s.logger.Info("server stopped", "server", s.name)
	return nil
}

// Stop makes Run shut down gracefully as if its context were done, without
// waiting for it; Run's return tells when it is over. Safe to call twice,
// concurrently, and before Run (which then stops as soon as it is listening).
func (s *Server) Stop() {
	s.stopOnce.Do(func() { close(s.stop) })
}

// Ready returns a channel closed once Run is listening. It is never closed if
// Run fails to listen, so wait on Run's result as well.
func (s *Server) Ready() <-chan struct{} {
	return s.ready
}

// Addr returns the address Run listens on (with the actual port when Listen's
// port is 0), or "" before it listens.
func (s *Server) Addr() string {
	if p := s.addr.Load(); p != nil {
		return *p
	}
	return ""
}
