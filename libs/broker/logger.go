package broker

import (
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
)

// WatermillLogger adapts l to Watermill's logger interface, using
// Watermill's own slog adapter: Watermill's Trace level maps to
// watermill.LevelTrace (below Debug), the others to their slog namesakes. A
// nil l discards everything, rather than falling back to slog.Default as
// Watermill does, so no process-global logger is used implicitly.
func WatermillLogger(l *slog.Logger) watermill.LoggerAdapter {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return watermill.NewSlogLogger(l)
}
