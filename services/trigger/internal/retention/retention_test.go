package retention

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

type fakeStore struct {
	mu    sync.Mutex
	calls []time.Time
	fail  int // fail this many calls first
	ran   chan struct{}
}

func (s *fakeStore) Maintain(_ context.Context, now time.Time, _ store.Retention) (store.MaintainResult, error) {
	s.mu.Lock()
	defer func() { s.mu.Unlock(); s.ran <- struct{}{} }()
	s.calls = append(s.calls, now)
	if s.fail > 0 {
		s.fail--
		return store.MaintainResult{}, errors.New("database down")
	}
	var res store.MaintainResult
	res.Days = 10
	return res, nil
}

// leader leads at once and until ctx ends.
type leader struct{}

func (leader) Campaign(ctx context.Context, fn func(context.Context)) error {
	fn(ctx)
	return nil
}

func TestKeeperRunsAtStartAndEveryInterval(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 3, 10, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	st := &fakeStore{fail: 1, ran: make(chan struct{}, 10)}
	reg := prometheus.NewRegistry()
	k, err := New(Options{Store: st, Leadership: leader{}, Clock: clk, Metrics: reg,
		Retention: store.Retention{Ledger: time.Hour, Tombstones: time.Hour}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()

	<-st.ran // the first run, at start, fails: the next comes after a minute
	require.Eventually(t, func() bool { return clk.Waiters() > 0 }, 10*time.Second, time.Millisecond)
	clk.Advance(time.Minute)
	<-st.ran
	require.Eventually(t, func() bool { return clk.Waiters() > 0 }, 10*time.Second, time.Millisecond)
	clk.Advance(time.Hour - time.Second)
	require.Len(t, st.calls, 2, "no run before the hour")
	clk.Advance(time.Second)
	<-st.ran
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, []time.Time{t0, t0.Add(time.Minute), t0.Add(time.Minute + time.Hour)}, st.calls)
	require.Equal(t, 1.0, testutil.ToFloat64(k.runs.WithLabelValues("error")))
	require.Equal(t, 2.0, testutil.ToFloat64(k.runs.WithLabelValues("ok")))
	require.Equal(t, 10.0, testutil.ToFloat64(k.days))
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	ok := store.Retention{Ledger: time.Hour, Tombstones: time.Hour}
	for name, opts := range map[string]Options{
		"no store":          {Leadership: leader{}, Retention: ok},
		"no leadership":     {Store: &fakeStore{}, Retention: ok},
		"no ledger days":    {Store: &fakeStore{}, Leadership: leader{}, Retention: store.Retention{Tombstones: time.Hour}},
		"negative interval": {Store: &fakeStore{}, Leadership: leader{}, Retention: ok, Interval: -time.Second},
	} {
		_, err := New(opts)
		require.Error(t, err, name)
	}
}
