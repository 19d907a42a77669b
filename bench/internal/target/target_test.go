package target_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/bench/internal/target"
)

func TestServerRecordsJobAndWebhookID(t *testing.T) {
	t.Parallel()
	s, err := target.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	id := uuid.New()
	post := func(path, webhookID string) {
		req, err := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("webhook-id", webhookID)
		req.Header.Set("Cronmesh-Nominal-Time", "2026-11-26T10:00:01Z")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
	}
	post("/j/42", id.String())
	post("/elsewhere", id.String())
	post("/j/7", "not-a-uuid")
	got := s.Deliveries()
	require.Len(t, got, 3)
	require.Equal(t, int32(42), got[0].Job)
	require.Equal(t, id, got[0].WebhookID)
	require.False(t, got[0].At.IsZero())
	require.Equal(t, time.Date(2026, 11, 26, 10, 0, 1, 0, time.UTC), got[0].Nominal)
	require.Equal(t, int32(-1), got[1].Job)
	require.Equal(t, uuid.Nil, got[2].WebhookID)
	require.Equal(t, 2, s.Malformed())
	require.Len(t, s.Since(1), 2)
}
