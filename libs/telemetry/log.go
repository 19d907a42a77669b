package telemetry

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// NewLogger returns a JSON slog logger writing to w at the given level, with a
// "service" attribute on every record. level is one of "debug", "info",
// "warn", "error" (case-insensitive); "" means "info"; anything else is an
// error, so a typo fails at startup instead of hiding logs.
func NewLogger(w io.Writer, level, service string) (*slog.Logger, error) {
	var lvl slog.Level
	switch strings.ToLower(cmp.Or(level, "info")) {
	case "debug":
		lvl = slog.LevelDebug
	case "info":
		lvl = slog.LevelInfo
	case "warn":
		lvl = slog.LevelWarn
	case "error":
		lvl = slog.LevelError
	default:
		return nil, fmt.Errorf("telemetry: unknown log level %q (want debug, info, warn or error)", level)
	}
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})
	return slog.New(h).With("service", service), nil
}
