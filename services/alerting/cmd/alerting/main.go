// Command alerting serves cronmesh.alerting.v1.AlertService: rules on
// consecutive failures and missed schedules, delivered by webhook and email.
//
//	alerting [serve] [flags]   run the service (applies migrations first)
//	alerting migrate [flags]   apply the database migrations and exit
//
// Every flag also reads CRONMESH_<FLAG> from the environment (for example
// --api-keys from CRONMESH_API_KEYS); a flag given on the command line wins.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // time zones must resolve the same on every host, with or without a system tz database.

	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/telemetry"
	"github.com/cronmesh/cronmesh/services/alerting/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.LookupEnv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "alerting:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stderr io.Writer) error {
	command := "serve"
	if len(args) > 0 && (args[0] == "serve" || args[0] == "migrate") {
		command, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("alerting "+command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg app.Config
	cfg.Register(fs)
	if err := config.Parse(fs, args, lookupEnv); err != nil {
		return err
	}
	logger, err := telemetry.NewLogger(stderr, cfg.LogLevel, "alerting")
	if err != nil {
		return err
	}
	if command == "migrate" {
		return app.Migrate(ctx, cfg, logger)
	}
	a, err := app.New(ctx, cfg, logger)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
