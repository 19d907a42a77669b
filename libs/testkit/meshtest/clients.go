package meshtest

import (
	"net/http"

	"connectrpc.com/connect"

	"github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1/alertingv1connect"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1/dispatcherv1connect"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1/triggerv1connect"
	"github.com/cronmesh/cronmesh/libs/meshrun"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
)

// Clients are the Connect clients of a mesh's public APIs, every call made
// with one API key. A service the mesh does not run has a nil client.
type Clients struct {
	Jobs     registryv1connect.JobServiceClient
	Keys     registryv1connect.KeyServiceClient
	Dispatch dispatcherv1connect.DispatchServiceClient
	History  historyv1connect.HistoryServiceClient
	Alerts   alertingv1connect.AlertServiceClient
	// Trigger is the first trigger node's.
	Trigger triggerv1connect.TriggerServiceClient
}

// NewClients returns the clients of mesh's services over
// http.DefaultClient, with key as their bearer (rpctest.Bearer) and opts.
func NewClients(mesh *meshrun.Mesh, key string, opts ...connect.ClientOption) *Clients {
	opts = append([]connect.ClientOption{rpctest.Bearer(key)}, opts...)
	var c Clients
	if mesh.Registry != nil {
		c.Jobs = registryv1connect.NewJobServiceClient(http.DefaultClient, mesh.Registry.URL, opts...)
		c.Keys = registryv1connect.NewKeyServiceClient(http.DefaultClient, mesh.Registry.URL, opts...)
	}
	if mesh.Dispatcher != nil {
		c.Dispatch = dispatcherv1connect.NewDispatchServiceClient(http.DefaultClient, mesh.Dispatcher.URL, opts...)
	}
	if mesh.History != nil {
		c.History = historyv1connect.NewHistoryServiceClient(http.DefaultClient, mesh.History.URL, opts...)
	}
	if mesh.Alerting != nil {
		c.Alerts = alertingv1connect.NewAlertServiceClient(http.DefaultClient, mesh.Alerting.URL, opts...)
	}
	if len(mesh.Triggers) > 0 {
		c.Trigger = triggerv1connect.NewTriggerServiceClient(http.DefaultClient, mesh.Triggers[0].URL, opts...)
	}
	return &c
}
