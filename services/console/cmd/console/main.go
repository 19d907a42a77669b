// Command console serves cronmesh's web console: the single-page
// application embedded in the binary, and the five services' APIs
// forwarded on the same origin so the browser calls them without CORS.
//
//	console [serve] [flags]
//
// Every flag also reads CRONMESH_<FLAG> from the environment (for example
// --registry-url from CRONMESH_REGISTRY_URL); a flag given on the command
// line wins.
package main

import (
	"github.com/cronmesh/cronmesh/libs/servicemain"
	"github.com/cronmesh/cronmesh/services/console/internal/app"
)

func main() {
	servicemain.Main(servicemain.Service[app.Config]{
		Name:     "console",
		Register: (*app.Config).Register,
		Serve:    app.Serve,
	})
}
