// Command dispatcher delivers dispatch requests: it consumes the
// per-priority dispatch queues, calls each job's webhook or publishes to
// its exchange, schedules retries through the broker's delay tiers, sends
// what cannot be delivered to the dead-letter queue (browsable and
// redrivable through the DispatchService API) and publishes lifecycle
// events.
//
//	dispatcher [serve] [flags]   run the dispatcher (applies migrations first)
//
// Every flag also reads CRONMESH_<FLAG> from the environment; a flag given
// on the command line wins.
package main

import (
	"github.com/cronmesh/cronmesh/libs/servicemain"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/app"
)

func main() {
	servicemain.Main(servicemain.Service[app.Config]{
		Name:     "dispatcher",
		Register: (*app.Config).Register,
		Serve:    app.Serve,
	})
}
