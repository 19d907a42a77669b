// Command devecho is the webhook target of the local stack (`make dev`):
// it logs every request to stdout, one line each (method, path, webhook-id,
// Idempotency-Key, traceparent, the slot's nominal time, attempt and
// trigger kind, the start of the body), and answers 200, or
// the code /status/{code} asks for, or 200 after /slow/{duration}. It also
// serves /healthz, /readyz and grpc.health.v1 like the services. It is a
// development tool: it checks no signature and keeps nothing.
//
//	devecho [--listen 127.0.0.1:8090] [--excerpt-bytes 200] [--max-slow 5m]
//
// Every flag also reads CRONMESH_<FLAG> from the environment; a flag given
// on the command line wins.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"time"

	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/servicemain"
	"github.com/cronmesh/cronmesh/services/devstack/internal/echo"
)

// DefaultListen is where `make dev` and the README's tour expect the target.
const DefaultListen = "127.0.0.1:8090"

// Config is devecho's configuration.
type Config struct {
	Listen          string
	LogLevel        string
	ShutdownTimeout time.Duration
	ExcerptBytes    int
	MaxSlow         time.Duration
}

// Register adds devecho's flags to fs.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", DefaultListen, "host:port to serve on")
	fs.StringVar(&c.LogLevel, "log-level", config.DefaultLogLevel, "level of the service log on stderr: debug, info, warn or error (request lines go to stdout)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 5*time.Second, "graceful shutdown timeout")
	fs.IntVar(&c.ExcerptBytes, "excerpt-bytes", echo.DefaultExcerptBytes, "bytes of each request body shown in its log line (negative: none)")
	fs.DurationVar(&c.MaxSlow, "max-slow", echo.DefaultMaxSlow, "longest wait /slow/{duration} accepts")
}

func main() {
	servicemain.Main(servicemain.Service[Config]{
		Name:            "devecho",
		Register:        (*Config).Register,
		LogLevel:        func(c Config) string { return c.LogLevel },
		ShutdownTimeout: func(c Config) time.Duration { return c.ShutdownTimeout },
		Serve: func(ctx context.Context, c Config, logger *slog.Logger) error {
			return serve(ctx, c, logger, slog.New(slog.NewTextHandler(os.Stdout, nil)))
		},
	})
}

// serve runs the echo target until ctx ends. Request lines go to requests,
// the server's own log to logger.
func serve(ctx context.Context, c Config, logger, requests *slog.Logger) error {
	// A /slow/ request is answered once its wait is over.
	limits := server.Limits{WriteTimeout: max(server.DefaultWriteTimeout, c.MaxSlow+time.Minute)}
	srv, err := server.New(server.Options{Name: "devecho", Listen: c.Listen, Logger: logger, ShutdownTimeout: c.ShutdownTimeout, Limits: limits})
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	srv.HandleHTTP("/", echo.New(echo.Options{Log: requests, ExcerptBytes: c.ExcerptBytes, MaxSlow: c.MaxSlow, Stop: stop}))
	// Nothing to wait for: the target is ready once it listens.
	srv.SetServing(true)
	go func() {
		<-ctx.Done()
		close(stop)
	}()
	return srv.Run(ctx)
}
