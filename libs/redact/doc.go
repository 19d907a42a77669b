// Package redact cuts what must not reach a span, a log line or an error
// message out of values that carry secrets by design.
package redact
