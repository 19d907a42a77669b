// Package tracelink turns an execution's W3C trace id into a link to a
// tracing UI (Jaeger, Grafana Tempo, ...) by filling a configured template,
// so that people and cronctl can open an execution's trace in one step.
package tracelink

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Placeholder is what a template holds where the trace id goes.
const Placeholder = "{trace_id}"

// sampleTraceID stands in for a real trace id when a template is validated:
// every real id is 32 lower-case hex digits too, so a template that yields a
// valid URL with it yields one with any id.
const sampleTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"

// Template is a validated trace-link template. The zero value and nil make
// no links.
type Template struct {
	raw string
}

// Parse validates raw: it must contain Placeholder (possibly several times)
// and, with a trace id in its place, be an absolute http or https URL with a
// host. An empty raw is no template: Parse returns nil and no error.
func Parse(raw string) (*Template, error) {
	if raw == "" {
		return nil, nil
	}
	if !strings.Contains(raw, Placeholder) {
		return nil, fmt.Errorf("trace link template %q: must contain %s", raw, Placeholder)
	}
	u, err := url.Parse(strings.ReplaceAll(raw, Placeholder, sampleTraceID))
	if err != nil {
		return nil, fmt.Errorf("trace link template %q: %w", raw, errors.Unwrap(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("trace link template %q: must be an absolute http:// or https:// URL", raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("trace link template %q: has no host", raw)
	}
	return &Template{raw: raw}, nil
}

// URL is the link to the trace traceID, or "" when t is nil or traceID is
// not a valid W3C trace id (32 lower-case hex digits, not all zero): the
// history stores what the events carried, and a missed slot has none.
// Only valid ids are substituted, so the result needs no escaping.
func (t *Template) URL(traceID string) string {
	if t == nil || t.raw == "" || !validTraceID(traceID) {
		return ""
	}
	return strings.ReplaceAll(t.raw, Placeholder, traceID)
}

// String is the template as configured.
func (t *Template) String() string {
	if t == nil {
		return ""
	}
	return t.raw
}

func validTraceID(id string) bool {
	if len(id) != 32 {
		return false
	}
	zero := true
	for i := range len(id) {
		c := id[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		default:
			return false
		}
		if c != '0' {
			zero = false
		}
	}
	return !zero
}
