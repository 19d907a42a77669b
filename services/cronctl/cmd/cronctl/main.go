// Command cronctl is the command-line client of cronmesh: jobs, declarative
// apply, dead letters and the trigger ring, over the generated Connect
// clients. `cronctl help` lists the commands; docs/cli.md describes them.
//
// Exit codes: 0 ok, 1 error, 2 usage, 3 `apply --dry-run` found differences.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/cronmesh/cronmesh/services/cronctl/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	home, _ := os.UserHomeDir()
	code := cli.Run(ctx, os.Args[1:], cli.Env{
		Stdin:     os.Stdin,
		Stdout:    os.Stdout,
		Stderr:    os.Stderr,
		LookupEnv: os.LookupEnv,
		Home:      home,
		ReadFile: func(path string) ([]byte, error) {
			if path == "-" {
				return io.ReadAll(os.Stdin)
			}
			return os.ReadFile(path)
		},
	})
	stop()
	os.Exit(code)
}
