package app_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/services/history/internal/app"
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
		{"executions-exchange", app.Config{ExecutionsExchange: "team-a.executions"}, `--executions-exchange "team-a.executions"`},
		{"queue", app.Config{Queue: "team-a.history"}, `--queue "team-a.history"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := app.New(context.Background(), tc.cfg, slog.New(slog.DiscardHandler))
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "could be published to by the AMQP targets of namespace")
		})
	}
}
