package app_test

import (
	"testing"

	"github.com/cronmesh/cronmesh/libs/testkit/apptest"
	"github.com/cronmesh/cronmesh/services/alerting/internal/app"
)

// TestNewRefusesNamesATargetCouldReach: a namespace's AMQP targets may
// publish to "<namespace>.*", so an internal name of that form would let
// it forge messages into the service; the service does not start.
func TestNewRefusesNamesATargetCouldReach(t *testing.T) {
	t.Parallel()
	apptest.RefusesReachableNames(t, app.Serve, []apptest.ReachableName[app.Config]{
		{Flag: "executions-queue", Value: "team-a.alerting", Config: app.Config{ExecutionsQueue: "team-a.alerting"}},
		{Flag: "jobs-exchange", Value: "team-a.jobs", Config: app.Config{JobsExchange: "team-a.jobs"}},
	})
}
