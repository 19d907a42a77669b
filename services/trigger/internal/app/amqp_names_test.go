package app_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/services/trigger/internal/app"
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
		{"jobs-queue", app.Config{JobsQueue: "team-a.trigger-jobs"}, `--jobs-queue "team-a.trigger-jobs"`},
		{"dispatch-queue", app.Config{DispatchQueue: "dispatch"}, `--dispatch-queue "dispatch"`},
		{"dispatch-exchange", app.Config{DispatchExchange: "team-a.dispatch"}, `--dispatch-exchange "team-a.dispatch"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := app.New(context.Background(), tc.cfg, slog.New(slog.DiscardHandler))
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "could be published to by the AMQP targets of namespace")
		})
	}
}
