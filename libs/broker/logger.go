package broker

import (
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
)

// WatermillLogger adapts l to Watermill's logger interface, using
// Watermill's own slog adapter: Watermill's Trace level maps to
// watermill.LevelTrace (below Debug), its Info to Debug (Watermill logs a
// line at Info for every subscription it starts, hundreds per service
// here, each worker being a subscription), and Error to Error. A nil l
// discards everything, rather than falling back to slog.Default as
// Watermill does, so no process-global logger is used implicitly.
func WatermillLogger(l *slog.Logger) watermill.LoggerAdapter {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return watermill.NewSlogLoggerWithLevelMapping(l, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug})
}
