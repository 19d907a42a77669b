// Package reqlimit holds the caps on request fields that several APIs share
// (ids, page tokens, label maps, enum filters, URLs, hosts) and checks them
// the one way every handler reports a wrong field: a field violation of
// INVALID_ARGUMENT naming it. A cap keeps one field from costing more
// (memory, a scan, a log line) than its purpose needs; each is far above
// anything a well-formed request sends, and well below the server's read
// limit, which bounds the request as a whole.
package reqlimit

import (
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/cronmesh/cronmesh/libs/rpcerr"
)

// Caps shared by the APIs.
const (
	// MaxIDBytes bounds an id: every id the services issue is a UUID (36
	// bytes).
	MaxIDBytes = 64
	// MaxPageTokenBytes bounds a page token: every token the services issue
	// is under 100 bytes.
	MaxPageTokenBytes = 512
	// MaxEnumFilter bounds a list of enum values used as a filter (history's
	// statuses and trigger kinds): each value once, with room for values
	// added later.
	MaxEnumFilter = 16
	// MaxLabels, MaxLabelKeyBytes and MaxLabelValueBytes bound a label map:
	// a job's labels and the filters and selectors that match them.
	MaxLabels          = 64
	MaxLabelKeyBytes   = 63
	MaxLabelValueBytes = 255
	// MaxURLBytes bounds a URL (job targets, webhook channels).
	MaxURLBytes = 2048
	// MaxHeaders, MaxHeaderNameBytes and MaxHeaderValueBytes bound the
	// headers of a job's target (the registry's jobs, the dispatcher's
	// redrive override).
	MaxHeaders          = 32
	MaxHeaderNameBytes  = 256
	MaxHeaderValueBytes = 4 << 10
	// MaxBodyBytes bounds the body of a job's target.
	MaxBodyBytes = 256 << 10
	// MaxStatusCodes bounds the status codes an HTTP target accepts: a job
	// lists the few codes it expects, never every one.
	MaxStatusCodes = 100
	// MaxAMQPNameBytes bounds an AMQP exchange, routing key or content
	// type: AMQP's short strings hold 255 bytes.
	MaxAMQPNameBytes = 255
	// MaxHostBytes bounds a host name: a DNS name has at most 253
	// characters.
	MaxHostBytes = 253
	// MaxEmailAddressBytes bounds an email address (RFC 5321 allows 254
	// in a path; a display name adds some).
	MaxEmailAddressBytes = 320
)

// Bytes records a violation of field when s is longer than maxBytes bytes.
// It reports whether s is within the cap, so a caller can skip checks that
// would cost more on an oversized value.
func Bytes(v *rpcerr.Violations, field, s string, maxBytes int) bool {
	if len(s) > maxBytes {
		v.Add(field, "must be at most %d bytes, got %d", maxBytes, len(s))
		return false
	}
	return true
}

// ID checks an id field against MaxIDBytes.
func ID(v *rpcerr.Violations, field, id string) bool { return Bytes(v, field, id, MaxIDBytes) }

// PageToken checks a page token field against MaxPageTokenBytes.
func PageToken(v *rpcerr.Violations, field, token string) bool {
	return Bytes(v, field, token, MaxPageTokenBytes)
}

// Count records a violation of field when a list or map holds more than
// maxItems items, and reports whether it is within the cap.
func Count(v *rpcerr.Violations, field string, n, maxItems int) bool {
	if n > maxItems {
		v.Add(field, "must hold at most %d items, got %d", maxItems, n)
		return false
	}
	return true
}

// IDs checks a list of ids: at most maxItems, each within MaxIDBytes (the
// first too long is named by its index).
func IDs(v *rpcerr.Violations, field string, ids []string, maxItems int) bool {
	if !Count(v, field, len(ids), maxItems) {
		return false
	}
	for i, id := range ids {
		if !ID(v, fmt.Sprintf("%s[%d]", field, i), id) {
			return false
		}
	}
	return true
}

// Labels checks the size of a label map used as a filter or selector: at
// most MaxLabels entries, each key at most MaxLabelKeyBytes and each value
// at most MaxLabelValueBytes of valid UTF-8. A bad entry is named
// field["key"]. (A job's own labels have stricter rules: the registry's.)
func Labels(v *rpcerr.Violations, field string, labels map[string]string) bool {
	if !Count(v, field, len(labels), MaxLabels) {
		return false
	}
	ok := true
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys) // violations in a stable order
	for _, k := range keys {
		val := labels[k]
		if len(k) > MaxLabelKeyBytes || len(val) > MaxLabelValueBytes || !utf8.ValidString(val) {
			name := k
			if len(name) > MaxLabelKeyBytes {
				name = name[:MaxLabelKeyBytes] + "…"
			}
			v.Add(fmt.Sprintf("%s[%q]", field, name), "key must be at most %d bytes, value at most %d bytes of UTF-8",
				MaxLabelKeyBytes, MaxLabelValueBytes)
			ok = false
		}
	}
	return ok
}
