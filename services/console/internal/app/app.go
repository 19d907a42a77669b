package app

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1/alertingv1connect"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1/dispatcherv1connect"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1/triggerv1connect"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/ratelimit"
	"github.com/cronmesh/cronmesh/libs/rpcclient"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/service"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
	"github.com/cronmesh/cronmesh/services/console/internal/assets"
	"github.com/cronmesh/cronmesh/services/console/internal/gateway"
)

// Defaults of the console: the `make dev` addresses of the five services.
const (
	DefaultListen        = "127.0.0.1:8080"
	DefaultRegistryURL   = "http://127.0.0.1:8081"
	DefaultTriggerURL    = "http://127.0.0.1:8082"
	DefaultDispatcherURL = "http://127.0.0.1:8083"
	DefaultHistoryURL    = "http://127.0.0.1:8084"
	DefaultAlertingURL   = "http://127.0.0.1:8085"
)

// Config is everything the console is told at start. Of config.Common it
// uses the listener, TLS, logging, telemetry, shutdown and request limits;
// it holds no database, broker or etcd connection, so those flags are
// accepted (every service takes them) and ignored.
type Config struct {
	config.Common
	RegistryURL, TriggerURL, DispatcherURL, HistoryURL, AlertingURL string
	// UpstreamTLS is how the console reaches https:// services: the CA their
	// certificates chain to and, for mutual TLS, its client certificate.
	UpstreamTLS tlsconfig.Client
}

// Register adds the console's flags to fs.
func (c *Config) Register(fs *flag.FlagSet) {
	// The browser's largest call is a job or a dead-letter redrive at every
	// cap, under 1 MiB; it never sends the registry's large batches.
	c.Limits.MaxRequestBytes = server.SmallAPIMaxRequestBytes
	c.Common.Register(fs, DefaultListen)
	fs.StringVar(&c.RegistryURL, "registry-url", DefaultRegistryURL, "base URL of the registry (JobService, KeyService)")
	fs.StringVar(&c.TriggerURL, "trigger-url", DefaultTriggerURL, "base URL of a trigger node, or of a Service over them (TriggerService)")
	fs.StringVar(&c.DispatcherURL, "dispatcher-url", DefaultDispatcherURL, "base URL of the dispatcher (DispatchService)")
	fs.StringVar(&c.HistoryURL, "history-url", DefaultHistoryURL, "base URL of the history (HistoryService)")
	fs.StringVar(&c.AlertingURL, "alerting-url", DefaultAlertingURL, "base URL of the alerting service (AlertService)")
	fs.StringVar(&c.UpstreamTLS.CAFile, "upstream-ca-file", "", "PEM CA certificates the https:// service URLs must chain to (default: the system's)")
	fs.StringVar(&c.UpstreamTLS.CertFile, "upstream-client-cert", "", "PEM client certificate for services that require one (mutual TLS)")
	fs.StringVar(&c.UpstreamTLS.KeyFile, "upstream-client-key", "", "PEM key of --upstream-client-cert")
}

// Upstreams are the services the console forwards to, from the
// configuration.
func (c Config) Upstreams() []gateway.Upstream {
	return []gateway.Upstream{
		{Name: "registry", URL: c.RegistryURL, Services: []string{registryv1connect.JobServiceName, registryv1connect.KeyServiceName}},
		{Name: "trigger", URL: c.TriggerURL, Services: []string{triggerv1connect.TriggerServiceName}},
		{Name: "dispatcher", URL: c.DispatcherURL, Services: []string{dispatcherv1connect.DispatchServiceName}},
		{Name: "history", URL: c.HistoryURL, Services: []string{historyv1connect.HistoryServiceName}},
		{Name: "alerting", URL: c.AlertingURL, Services: []string{alertingv1connect.AlertServiceName}},
	}
}

// Option changes how New builds the console.
type Option func(*options)

type options struct{ assets fs.FS }

// WithAssets serves files instead of the embedded build (tests serve a
// built page, or none).
func WithAssets(files fs.FS) Option { return func(o *options) { o.assets = files } }

// App is a running console.
type App struct {
	svc *service.Service
}

// New builds the console; nothing serves until Run.
func New(ctx context.Context, cfg Config, logger *slog.Logger, opts ...Option) (_ *App, err error) {
	o := options{assets: assets.Built()}
	for _, opt := range opts {
		opt(&o)
	}
	client, err := rpcclient.NewHTTPClient(cfg.UpstreamTLS)
	if err != nil {
		return nil, fmt.Errorf("--upstream-ca-file, --upstream-client-cert, --upstream-client-key: %w", err)
	}
	routes, err := gateway.Routes(cfg.Upstreams(), client.Transport, logger.With(slog.String("component", "gateway")))
	if err != nil {
		return nil, err
	}
	common := cfg.Common
	// The console authenticates and limits nothing itself: the services it
	// forwards to do, by the caller's key.
	common.RateLimit = ratelimit.Config{}
	svc, err := service.New(ctx, service.Options{Name: "console", Config: common, Logger: logger})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			svc.Close(context.Background())
		}
	}()
	forwarded := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "console_forwarded_calls_total",
		Help: "Calls the console forwarded to a service, by service and HTTP status of the answer (502: the service did not answer).",
	}, []string{"upstream", "status"})
	if err := svc.Metrics.Register(forwarded); err != nil {
		return nil, err
	}
	for _, r := range routes {
		svc.Server.HandleHTTP(r.Pattern, countStatus(r.Handler, forwarded.MustCurryWith(prometheus.Labels{"upstream": r.Upstream})))
	}
	svc.Server.HandleHTTP("/", assets.Handler(o.assets))
	return &App{svc: svc}, nil
}

// Server is the console's HTTP server.
func (a *App) Server() *server.Server { return a.svc.Server }

// Run serves until ctx is done. The console holds no state and needs no
// dependency to answer (a service that is down fails only the calls to
// it), so it is ready as soon as it listens.
func (a *App) Run(ctx context.Context) error { return a.svc.Run(ctx) }

// countStatus counts next's answers in calls by their HTTP status.
func countStatus(next http.Handler, calls *prometheus.CounterVec) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		calls.WithLabelValues(strconv.Itoa(rec.status)).Inc()
	})
}

// Serve builds the app from cfg and runs it until ctx is done: the binary's
// serve command (libs/servicemain).
func Serve(ctx context.Context, cfg Config, logger *slog.Logger) error {
	a, err := New(ctx, cfg, logger)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// statusRecorder remembers the status a handler answered; Unwrap keeps
// http.ResponseController's flushes and deadlines working through it.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
