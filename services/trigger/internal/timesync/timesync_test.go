package timesync_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/services/trigger/internal/timesync"
)

// reference is a database whose clock reads the host's fake clock plus
// skew, and whose query takes rtt of the host's clock.
type reference struct {
	host *clock.Fake
	skew time.Duration
	rtt  time.Duration
	err  error
}

func (r *reference) ServerTime(context.Context) (time.Time, error) {
	if r.err != nil {
		return time.Time{}, r.err
	}
	r.host.Advance(r.rtt / 2)
	now := r.host.Now().Add(r.skew)
	r.host.Advance(r.rtt / 2)
	return now, nil
}

func TestSync(t *testing.T) {
	t.Parallel()
	host := clock.NewFake(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	// The host's clock is 10 s ahead of the database's.
	ref := &reference{host: host, skew: -10 * time.Second, rtt: 4 * time.Millisecond}
	corrected := clock.NewOffset(host, 0)
	s, err := timesync.New(timesync.Options{Reference: ref, Clock: corrected, Local: host, Metrics: prometheus.NewRegistry()})
	require.NoError(t, err)

	offset, err := s.Sync(t.Context())
	require.NoError(t, err)
	require.Equal(t, -10*time.Second, offset)
	require.Equal(t, -10*time.Second, corrected.Offset(), "the node's clock now reads the database's")
	require.Equal(t, host.Now().Add(-10*time.Second), corrected.Now())

	// Noise within the tolerance leaves the correction alone.
	ref.skew = -10*time.Second + 30*time.Millisecond
	_, err = s.Sync(t.Context())
	require.NoError(t, err)
	require.Equal(t, -10*time.Second, corrected.Offset())

	// The host's clock is fixed: the correction goes back to none.
	ref.skew = 20 * time.Millisecond
	_, err = s.Sync(t.Context())
	require.NoError(t, err)
	require.Zero(t, corrected.Offset(), "an offset within the tolerance is not corrected")

	// A failed measurement changes nothing.
	ref.skew, ref.err = 5*time.Second, errors.New("connection refused")
	_, err = s.Sync(t.Context())
	require.Error(t, err)
	require.Zero(t, corrected.Offset())
}

func TestSyncKeepsTheFastestSample(t *testing.T) {
	t.Parallel()
	host := clock.NewFake(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	calls := 0
	// The first reading is slow and lopsided (the server answered at the
	// start of a 2 s round trip); the others are fast and exact.
	ref := timesync.Reference(referenceFunc(func(context.Context) (time.Time, error) {
		calls++
		if calls == 1 {
			now := host.Now()
			host.Advance(2 * time.Second)
			return now, nil
		}
		host.Advance(time.Millisecond)
		now := host.Now()
		host.Advance(time.Millisecond)
		return now, nil
	}))
	corrected := clock.NewOffset(host, 0)
	s, err := timesync.New(timesync.Options{Reference: ref, Clock: corrected, Local: host})
	require.NoError(t, err)
	offset, err := s.Sync(t.Context())
	require.NoError(t, err)
	require.Zero(t, offset, "the 2 s sample would have measured -1 s")
	require.Equal(t, 3, calls)
}

type referenceFunc func(context.Context) (time.Time, error)

func (f referenceFunc) ServerTime(ctx context.Context) (time.Time, error) { return f(ctx) }
