package app_test

import (
	"testing"

	"github.com/cronmesh/cronmesh/libs/testkit/apptest"
	"github.com/cronmesh/cronmesh/services/trigger/internal/app"
)

// TestNewRefusesNamesATargetCouldReach: a namespace's AMQP targets may
// publish to "<namespace>.*", so an internal name of that form would let
// it forge messages into the service; the service does not start.
func TestNewRefusesNamesATargetCouldReach(t *testing.T) {
	t.Parallel()
	apptest.RefusesReachableNames(t, app.Serve, []apptest.ReachableName[app.Config]{
		{Flag: "jobs-queue", Value: "team-a.trigger-jobs", Config: app.Config{JobsQueue: "team-a.trigger-jobs"}},
		{Flag: "dispatch-queue", Value: "dispatch", Config: app.Config{DispatchQueue: "dispatch"}},
		{Flag: "dispatch-exchange", Value: "team-a.dispatch", Config: app.Config{DispatchExchange: "team-a.dispatch"}},
	})
}
