// Command devetcd runs a single-member embedded etcd for local development
// (`make dev`), so that nothing has to be installed to run the trigger ring.
// Production points the trigger at a real etcd cluster (--etcd-endpoints).
//
//	devetcd [--listen 127.0.0.1:2379] [--data-dir .dev/etcd]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/cronmesh/cronmesh/libs/telemetry"
	"github.com/cronmesh/cronmesh/libs/testkit/etcdtest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "devetcd:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("devetcd", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:2379", "client address")
	dataDir := fs.String("data-dir", ".dev/etcd", "data directory")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	logger, err := telemetry.NewLogger(os.Stderr, "warn", "devetcd")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return err
	}
	server, err := etcdtest.Start(*dataDir, "http://"+*listen, logger)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case <-ctx.Done():
	case err := <-server.Err():
		server.Close()
		return err
	}
	server.Close()
	return nil
}
