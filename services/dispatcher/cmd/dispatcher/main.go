// Command dispatcher delivers dispatch requests: it consumes the
// per-priority dispatch queues, calls each job's webhook or publishes to
// its exchange, schedules retries through the broker's delay tiers, sends
// what cannot be delivered to the dead-letter queue (browsable and
// redrivable through the DispatchService API) and publishes lifecycle
// events.
//
//	dispatcher [serve] [flags]   run the dispatcher (applies migrations first)
//
// Every flag also reads CRONMESH_<FLAG> from the environment; a flag given
// on the command line wins.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/telemetry"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.LookupEnv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "dispatcher:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stderr io.Writer) error {
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:]
	}
	fs := flag.NewFlagSet("dispatcher", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg app.Config
	cfg.Register(fs)
	if err := config.Parse(fs, args, lookupEnv); err != nil {
		return err
	}
	logger, err := telemetry.NewLogger(stderr, cfg.LogLevel, "dispatcher")
	if err != nil {
		return err
	}
	a, err := app.New(ctx, cfg, logger)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
