// Package servicemain is the main function of every cronmesh service
// binary, so that they all behave alike: an optional first argument "serve"
// (the default) or "migrate", flags that fall back to CRONMESH_<FLAG>
// environment variables (libs/config), a JSON logger at the configured
// level, SIGINT or SIGTERM as the start of a graceful shutdown bounded by
// the configured shutdown timeout, and the garbage collector's target at
// DefaultGCPercent unless GOGC says otherwise.
package servicemain

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/telemetry"
)

// Service describes one binary around its configuration type C.
type Service[C any] struct {
	// Name is the binary's and the logger's service name.
	Name string
	// Register adds C's flags to fs.
	Register func(c *C, fs *flag.FlagSet)
	// LogLevel returns the configured log level. Nil when C embeds
	// config.Common: its LogLevel.
	LogLevel func(c C) string
	// ShutdownTimeout returns the configured shutdown timeout: how long
	// Serve has to return once the signal arrived; 0 means
	// config.DefaultShutdownTimeout. Nil when C embeds config.Common: its
	// ShutdownTimeout.
	ShutdownTimeout func(c C) time.Duration
	// Serve runs the service until ctx ends (the signal), then shuts it
	// down and returns. A service's app package has it as app.Serve: build
	// the app, then run it.
	Serve func(ctx context.Context, c C, logger *slog.Logger) error
	// Migrate, if set, is the "migrate" subcommand: apply the database
	// migrations and return.
	Migrate func(ctx context.Context, c C, logger *slog.Logger) error
}

// DefaultGCPercent is the collector's target (GOGC) of every service when
// GOGC is not set. The services keep small live heaps (40-100 MiB in the
// end-to-end benchmark) and allocate per message, so at Go's default of
// 100 they collect very often: at 200 the dispatcher used 10 % less CPU
// for the same deliveries (docs/benchmarks.md). The heap may grow to three
// times the live data instead of two; in a container, GOMEMLIMIT (the Helm
// chart sets it to the memory limit) makes the collector work harder near
// the limit rather than let the process be killed.
const DefaultGCPercent = 200

// Main runs s with the process's arguments, environment and stderr, and
// exits with status 1, after printing the error, when it fails, including
// when its shutdown overran the timeout (Run then returns without waiting
// for what is still running, which the exit ends).
func Main[C any](s Service[C]) {
	TuneGC(os.LookupEnv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, s, os.Args[1:], os.LookupEnv, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, s.Name+":", err)
		os.Exit(1)
	}
}

// TuneGC sets the collector's target to DefaultGCPercent unless the
// environment (lookupEnv) sets GOGC, which the runtime has applied.
func TuneGC(lookupEnv func(string) (string, bool)) {
	if _, ok := lookupEnv("GOGC"); ok {
		return
	}
	debug.SetGCPercent(DefaultGCPercent)
}

// validator is a configuration that checks itself once parsed; every
// service's configuration is one through the config.Common it embeds.
type validator interface{ Validate() error }

// shared is a configuration that embeds config.Common.
type shared interface{ Shared() config.Common }

// withCommonDefaults fills in s's LogLevel and ShutdownTimeout from
// config.Common where they are nil and C embeds it.
func withCommonDefaults[C any](s Service[C]) Service[C] {
	var zero C
	if _, ok := any(zero).(shared); !ok {
		return s
	}
	if s.LogLevel == nil {
		s.LogLevel = func(c C) string { return any(c).(shared).Shared().LogLevel }
	}
	if s.ShutdownTimeout == nil {
		s.ShutdownTimeout = func(c C) time.Duration { return any(c).(shared).Shared().ShutdownTimeout }
	}
	return s
}

// Run parses args (after an optional "serve" or, when the service has one,
// "migrate") with environment fallbacks from lookupEnv, builds the logger
// on stderr and runs the subcommand. Flag errors come back as errors, as
// does the error of the configuration's Validate method when it has one
// (config.Common's: flags that go together); -h prints the usage and returns
// flag.ErrHelp.
func Run[C any](ctx context.Context, s Service[C], args []string, lookupEnv func(string) (string, bool), stderr io.Writer) error {
	s = withCommonDefaults(s)
	if s.Name == "" || s.Register == nil || s.LogLevel == nil || s.ShutdownTimeout == nil || s.Serve == nil {
		return errors.New("servicemain: Service needs a Name, Register and Serve, and a LogLevel and ShutdownTimeout unless its configuration embeds config.Common")
	}
	command := "serve"
	if len(args) > 0 && (args[0] == "serve" || (args[0] == "migrate" && s.Migrate != nil)) {
		command, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet(s.Name+" "+command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg C
	s.Register(&cfg, fs)
	if err := config.Parse(fs, args, lookupEnv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (subcommands: serve%s)", fs.Arg(0), map[bool]string{true: ", migrate"}[s.Migrate != nil])
	}
	if v, ok := any(cfg).(validator); ok {
		if err := v.Validate(); err != nil {
			return err
		}
	}
	logger, err := telemetry.NewLogger(stderr, s.LogLevel(cfg), s.Name)
	if err != nil {
		return err
	}
	if command == "migrate" {
		return s.Migrate(ctx, cfg, logger)
	}
	return serveBounded(ctx, s.Serve, cfg, logger, cmp.Or(s.ShutdownTimeout(cfg), config.DefaultShutdownTimeout), stderr)
}

// serveBounded runs serve until it returns, but once ctx is done (the
// signal) waits at most timeout for it. A service whose shutdown overruns
// has a bug, typically a call to a dependency that is down made without a
// deadline: rather than leave the process to be killed by whatever sent
// the signal (Kubernetes sends SIGKILL after its grace period), Run logs
// that and every goroutine's stack, to find the call, and returns an
// error, on which Main exits.
func serveBounded[C any](ctx context.Context, serve func(context.Context, C, *slog.Logger) error, cfg C, logger *slog.Logger, timeout time.Duration, stderr io.Writer) error {
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, logger) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	overrun := time.NewTimer(timeout)
	defer overrun.Stop()
	select {
	case err := <-done:
		return err
	case <-overrun.C:
	}
	logger.Error("shutdown did not finish within the shutdown timeout; exiting without waiting for it (goroutines follow)", "timeout", timeout.String())
	_ = pprof.Lookup("goroutine").WriteTo(stderr, 1)
	return fmt.Errorf("shutdown did not finish within %s", timeout)
}
