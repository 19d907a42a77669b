package app_test

import (
	"testing"

	"github.com/cronmesh/cronmesh/libs/testkit/apptest"
	"github.com/cronmesh/cronmesh/services/history/internal/app"
)

// TestNewRefusesNamesATargetCouldReach: a namespace's AMQP targets may
// publish to "<namespace>.*", so an internal name of that form would let
// it forge messages into the service; the service does not start.
func TestNewRefusesNamesATargetCouldReach(t *testing.T) {
	t.Parallel()
	apptest.RefusesReachableNames(t, app.Serve, []apptest.ReachableName[app.Config]{
		{Flag: "executions-exchange", Value: "team-a.executions", Config: app.Config{ExecutionsExchange: "team-a.executions"}},
		{Flag: "queue", Value: "team-a.history", Config: app.Config{Queue: "team-a.history"}},
	})
}
