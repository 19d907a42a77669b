// Command history serves cronmesh.history.v1.HistoryService: every execution
// of the last 30 days, fired or missed, fed by the lifecycle events.
//
//	history [serve] [flags]   run the service (applies migrations first)
//	history migrate [flags]   apply the database migrations and exit
//
// Every flag also reads CRONMESH_<FLAG> from the environment (for example
// --api-keys from CRONMESH_API_KEYS); a flag given on the command line wins.
package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/cronmesh/cronmesh/libs/servicemain"
	"github.com/cronmesh/cronmesh/services/history/internal/app"
)

func main() {
	servicemain.Main(servicemain.Service[app.Config]{
		Name:            "history",
		Register:        (*app.Config).Register,
		LogLevel:        func(c app.Config) string { return c.LogLevel },
		ShutdownTimeout: func(c app.Config) time.Duration { return c.ShutdownTimeout },
		Serve: func(ctx context.Context, c app.Config, logger *slog.Logger) error {
			a, err := app.New(ctx, c, logger)
			if err != nil {
				return err
			}
			return a.Run(ctx)
		},
		Migrate: app.Migrate,
	})
}
