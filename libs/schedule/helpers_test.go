package schedule

import (
	"testing"
	"time"

	// Embedded zone data, so that zone tests behave the same on machines
	// without /usr/share/zoneinfo (minimal CI images).
	_ "time/tzdata"

	"github.com/stretchr/testify/require"
)

// loadLocation loads an IANA zone or fails the test.
func loadLocation(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// ts parses an RFC 3339 time (with optional fraction) or panics; tests use it
// for literal instants.
func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// utcStrings renders times as RFC 3339 UTC so that failures show readable
// instants and equality does not depend on the Location pointer.
func utcStrings(times []time.Time) []string {
	out := make([]string, len(times))
	for i, t := range times {
		out[i] = t.UTC().Format(time.RFC3339Nano)
	}
	return out
}

// mustCron parses expr or fails the test.
func mustCron(t testing.TB, expr string) *Cron {
	t.Helper()
	c, err := ParseCron(expr)
	require.NoError(t, err, expr)
	return c
}

// setValues lists the values whose bits are set, for readable assertions.
func setValues(bits uint64) []int {
	var out []int
	for v := range 64 {
		if bits&(1<<v) != 0 {
			out = append(out, v)
		}
	}
	return out
}

// seq returns lo, lo+step, ... <= hi.
func seq(lo, hi, step int) []int {
	var out []int
	for v := lo; v <= hi; v += step {
		out = append(out, v)
	}
	return out
}
