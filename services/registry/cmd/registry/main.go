// Command registry serves cronmesh.registry.v1.JobService: job definitions,
// validation and the public job API.
//
//	registry [serve] [flags]   run the service (applies migrations first)
//	registry migrate [flags]   apply the database migrations and exit
//
// Every flag also reads CRONMESH_<FLAG> from the environment (for example
// --api-keys from CRONMESH_API_KEYS); a flag given on the command line wins.
package main

import (
	_ "time/tzdata" // time zones must resolve the same on every host, with or without a system tz database.

	"github.com/cronmesh/cronmesh/libs/servicemain"
	"github.com/cronmesh/cronmesh/services/registry/internal/app"
)

func main() {
	servicemain.Main(servicemain.Service[app.Config]{
		Name:     "registry",
		Register: (*app.Config).Register,
		Serve:    app.Serve,
		Migrate:  app.Migrate,
	})
}
