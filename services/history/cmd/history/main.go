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
	"github.com/cronmesh/cronmesh/libs/servicemain"
	"github.com/cronmesh/cronmesh/services/history/internal/app"
)

func main() {
	servicemain.Main(servicemain.Service[app.Config]{
		Name:     "history",
		Register: (*app.Config).Register,
		Serve:    app.Serve,
		Migrate:  app.Migrate,
	})
}
