// Command trigger runs one node of the trigger tier: it owns a share of the
// ring's partitions (through etcd leases) and fires every due slot of their
// jobs exactly once, publishing dispatch requests to RabbitMQ.
//
//	trigger [serve] [flags]   run the node (applies migrations first)
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
	_ "time/tzdata" // time zones must resolve the same on every host.

	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/telemetry"
	"github.com/cronmesh/cronmesh/services/trigger/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.LookupEnv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "trigger:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stderr io.Writer) error {
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:]
	}
	fs := flag.NewFlagSet("trigger", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg app.Config
	cfg.Register(fs)
	if err := config.Parse(fs, args, lookupEnv); err != nil {
		return err
	}
	logger, err := telemetry.NewLogger(stderr, cfg.LogLevel, "trigger")
	if err != nil {
		return err
	}
	a, err := app.New(ctx, cfg, logger)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
