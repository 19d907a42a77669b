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
	_ "time/tzdata" // time zones must resolve the same on every host.

	"github.com/cronmesh/cronmesh/libs/servicemain"
	"github.com/cronmesh/cronmesh/services/trigger/internal/app"
)

func main() {
	servicemain.Main(servicemain.Service[app.Config]{
		Name:     "trigger",
		Register: (*app.Config).Register,
		Serve:    app.Serve,
	})
}
