package echo_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/services/devstack/internal/echo"
)

// lines collects the request records of one handler (each test's
// requests run one at a time).
type lines struct {
	buf bytes.Buffer
}

func newLogger(l *lines) *slog.Logger {
	return slog.New(slog.NewTextHandler(&l.buf, nil))
}

func TestAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		method string
		path   string
		code   int
	}{
		{"default", http.MethodPost, "/hooks/demo", 200},
		{"root", http.MethodGet, "/", 200},
		{"status 500", http.MethodPost, "/status/500", 500},
		{"status 204", http.MethodPut, "/status/204", 204},
		{"status not a number", http.MethodPost, "/status/abc", 400},
		{"status below 200", http.MethodPost, "/status/101", 400},
		{"status above 599", http.MethodPost, "/status/600", 400},
		{"slow", http.MethodPost, "/slow/20ms", 200},
		{"slow not a duration", http.MethodPost, "/slow/soon", 400},
		{"slow beyond the maximum", http.MethodPost, "/slow/2h", 400},
		{"slow negative", http.MethodPost, "/slow/-1s", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var log lines
			h := echo.New(echo.Options{Log: newLogger(&log), MaxSlow: time.Minute})
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, strings.NewReader(`{"k":"v"}`)))
			require.Equal(t, tt.code, rec.Code)
			if tt.code == http.StatusNoContent {
				require.Empty(t, rec.Body.String(), "a 204 has no body")
			} else {
				var got struct {
					Method, Path string
					Status       int
				}
				require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
				require.Equal(t, tt.method, got.Method)
				require.Equal(t, tt.path, got.Path)
				require.Equal(t, tt.code, got.Status)
			}
			require.Equal(t, 1, strings.Count(log.buf.String(), "\n"), "one line per request:\n%s", log.buf.String())
			require.Contains(t, log.buf.String(), "status="+strconv.Itoa(tt.code))
		})
	}
}

func TestLogLineHoldsTheDeliveryHeaders(t *testing.T) {
	t.Parallel()
	var log lines
	h := echo.New(echo.Options{Log: newLogger(&log), ExcerptBytes: 8})
	req := httptest.NewRequest(http.MethodPost, "/hooks/demo?x=1", strings.NewReader(`{"kind":"nightly"}`))
	req.Header.Set("webhook-id", "exec-123")
	req.Header.Set("Idempotency-Key", "exec-123")
	req.Header.Set("traceparent", "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01")
	req.Header.Set("webhook-signature", "v1,c2VjcmV0")
	req.Header.Set("Cronmesh-Nominal-Time", "2026-03-01T03:00:00Z")
	req.Header.Set("Cronmesh-Attempt", "2")
	req.Header.Set("Cronmesh-Trigger-Kind", "catch-up")
	h.ServeHTTP(httptest.NewRecorder(), req)

	line := log.buf.String()
	for _, want := range []string{
		"method=POST", "path=\"/hooks/demo?x=1\"", "status=200", "webhook_id=exec-123", "idempotency_key=exec-123",
		"traceparent=00-0123456789abcdef0123456789abcdef-0123456789abcdef-01",
		"nominal_time=2026-03-01T03:00:00Z attempt=2 trigger_kind=catch-up", "bytes=18", `body="{\"kind\":..."`,
	} {
		require.Contains(t, line, want)
	}
	require.NotContains(t, line, "c2VjcmV0", "the signature is not logged")
}

func TestExcerptCutsAtARuneBoundary(t *testing.T) {
	t.Parallel()
	var log lines
	h := echo.New(echo.Options{Log: newLogger(&log), ExcerptBytes: 2})
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", strings.NewReader("äöü")))
	require.Contains(t, log.buf.String(), `body=ä...`)
}

func TestNoExcerpt(t *testing.T) {
	t.Parallel()
	var log lines
	h := echo.New(echo.Options{Log: newLogger(&log), ExcerptBytes: -1})
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", strings.NewReader("secret-ish")))
	require.NotContains(t, log.buf.String(), "secret-ish")
}

func TestStopEndsSlowRequests(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	h := echo.New(echo.Options{Stop: stop})
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/slow/4m", nil))
	}()
	close(stop)
	<-done // without Stop this would wait four minutes; the test timeout catches a hang
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
}
