package app_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/services/alerting/internal/app"
)

// TestNewRefusesNamesATargetCouldReach: a namespace's AMQP targets may
// publish to "<namespace>.*", so an internal name of that form would let
// it forge messages into the service; the service does not start.
func TestNewRefusesNamesATargetCouldReach(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  app.Config
		want string
	}{
		{"executions-queue", app.Config{ExecutionsQueue: "team-a.alerting"}, `--executions-queue "team-a.alerting"`},
		{"jobs-exchange", app.Config{JobsExchange: "team-a.jobs"}, `--jobs-exchange "team-a.jobs"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := app.New(context.Background(), tc.cfg, slog.New(slog.DiscardHandler))
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "could be published to by the AMQP targets of namespace")
		})
	}
}
