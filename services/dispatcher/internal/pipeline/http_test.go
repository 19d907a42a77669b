package pipeline_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/webhookcheck"
)

// hit is one request as an HTTP target saw it.
type hit struct {
	at     time.Time
	header http.Header
	body   []byte
}

// httpTarget is a loopback server answering every request with code,
// recording each.
type httpTarget struct {
	*httptest.Server
	mu   sync.Mutex
	hits []hit
}

func newHTTPTarget(t *testing.T, code int) *httpTarget {
	t.Helper()
	tg := &httpTarget{}
	tg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		tg.mu.Lock()
		tg.hits = append(tg.hits, hit{at: time.Now(), header: r.Header.Clone(), body: body})
		tg.mu.Unlock()
		w.WriteHeader(code)
		_, _ = io.WriteString(w, http.StatusText(code))
	}))
	t.Cleanup(tg.Close)
	return tg
}

func (tg *httpTarget) all() []hit {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]hit(nil), tg.hits...)
}

// httpClient is the production Deliverer, allowing loopback (the targets
// of these tests) as a development configuration does.
func httpClient(t *testing.T) *deliver.Client {
	t.Helper()
	c, err := deliver.New(deliver.Options{
		AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
	})
	require.NoError(t, err)
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// TestHTTPTargetFailing runs the production HTTP Deliverer against real
// targets: one that always answers 500 gets exactly 1 + max_retries
// attempts, each at least its tier's delay after the previous, every one
// with the same webhook-id and a signature that an independent verifier
// accepts, then a dead letter and a DEAD event; one that answers 404 gets
// one attempt and is dead at once.
func TestHTTPTargetFailing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		code     int
		attempts int
		reason   string
	}{
		{"500 is retried until exhausted", 500, 3, "retries exhausted after attempt 3: HTTP 500 Internal Server Error"},
		{"404 is not retried", 404, 1, "HTTP 404 Not Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.startDrainer()
			tg := newHTTPTarget(t, tt.code)
			r := e.start(httpClient(t))
			req := request(registryv1.Priority_PRIORITY_NORMAL, func(r *dispatchv1.DispatchRequest) {
				r.Target.GetHttp().Url = tg.URL + "/hook"
				r.Target.GetHttp().Body = `{"n":1}`
			})
			e.dispatch(nil, req)

			ev := e.waitFor(req.ExecutionId, dead, int32(tt.attempts))
			require.Equal(t, tt.reason, ev.Reason)
			require.EqualValues(t, tt.code, ev.ResponseStatus)
			require.Equal(t, http.StatusText(tt.code), ev.ResponseExcerpt)
			require.Eventually(t, func() bool {
				letters, _, err := e.store.ListDeadLetters(t.Context(), testNamespace, req.JobId, 10, store.Cursor{})
				require.NoError(t, err)
				return len(letters) == 1 && int(letters[0].Attempt) == tt.attempts && letters[0].ResponseStatus == int32(tt.code)
			}, 30*time.Second, 10*time.Millisecond)
			r.stop(t)

			hits := tg.all()
			require.Len(t, hits, tt.attempts, "exactly 1 + max_retries attempts for 500, one for 404")
			for i, h := range hits {
				id, err := webhookcheck.Verify(req.Target.GetHttp().SigningSecret, h.header, h.body, time.Minute, time.Now())
				require.NoError(t, err, "attempt %d", i+1)
				require.Equal(t, req.ExecutionId, id, "every attempt has the execution's webhook-id")
				require.Equal(t, `{"n":1}`, string(h.body))
			}
			// The request's policy: 100 ms doubling, on tiers 100/200/400/800 ms.
			// Lower bounds only: a loaded machine may be late, never early.
			tiers := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}
			for i := 1; i < len(hits); i++ {
				gap := hits[i].at.Sub(hits[i-1].at)
				t.Logf("gap before attempt %d: %v (tier %v)", i+1, gap, tiers[i-1])
				require.GreaterOrEqual(t, gap, tiers[i-1])
				require.Less(t, gap, tiers[i-1]+10*time.Second, "the retry is not lost in a wrong tier")
			}
			want := map[string]int{"dead/" + itoa(int32(tt.attempts)): 1}
			for a := 1; a <= tt.attempts; a++ {
				want["started/"+itoa(int32(a))]++
				want["failed/"+itoa(int32(a))]++
			}
			require.Equal(t, want, e.events.kinds(req.ExecutionId))
		})
	}
}

// TestHighOvertakesLowBacklog: with 10,000 low messages queued and low
// workers busy on them, high messages published afterwards are delivered
// before the low backlog drains.
func TestHighOvertakesLowBacklog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const backlog = 10_000
	var mu sync.Mutex
	lowDone := 0
	f := &fake{fn: func(ctx context.Context, req *dispatchv1.DispatchRequest) deliver.Outcome {
		if req.Priority == registryv1.Priority_PRIORITY_LOW {
			// A slow low target: the backlog takes at least
			// backlog*2ms/2 workers = 10 s to drain.
			time.Sleep(2 * time.Millisecond)
			mu.Lock()
			lowDone++
			mu.Unlock()
		}
		return deliver.Outcome{Result: deliver.Succeeded, StatusCode: 200}
	}}
	low := make([]*dispatchv1.DispatchRequest, backlog)
	for i := range low {
		low[i] = request(registryv1.Priority_PRIORITY_LOW)
	}
	// The queues exist before the pipeline (the trigger's publishes may
	// come first), so the backlog is there when it starts.
	require.NoError(t, broker.DeclareQueues(t.Context(), amqptest.URL(), broker.DispatchQueues(e.opts.DispatchExchange, e.opts.DispatchQueue)...))
	e.dispatchBulk(low...)
	require.Equal(t, backlog, e.queueDepth(e.dispatchQueue("low")))

	e.start(f, func(o *pipeline.Options) { o.Workers = pipeline.Workers{High: 2, Normal: 1, Low: 2} })
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return lowDone > 0 }, 30*time.Second, 5*time.Millisecond,
		"the low workers are busy with the backlog")

	high := make([]*dispatchv1.DispatchRequest, 20)
	for i := range high {
		high[i] = request(registryv1.Priority_PRIORITY_HIGH)
	}
	e.dispatchBulk(high...)
	for _, h := range high {
		e.waitFor(h.ExecutionId, succeeded, 1)
	}
	mu.Lock()
	done := lowDone
	mu.Unlock()
	t.Logf("all %d high delivered after %d of %d low", len(high), done, backlog)
	require.Less(t, done, backlog/2, "high did not wait for the low backlog")
	require.Positive(t, e.queueDepth(e.dispatchQueue("low")), "the low backlog is still there")
}
