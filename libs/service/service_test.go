package service_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/keyring"
	"github.com/cronmesh/cronmesh/libs/lifecycle"
	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/service"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
)

const testKey = "skeleton-key-0123456789abcdef"

// TestServiceBootsServesAndStopsInOrder boots a service with a database
// and API keys, runs it with a part that gates readiness and one stopped
// after the server, and checks what every service relies on: the
// migrations (its own and the audit log's) are applied, /readyz waits for
// the part, the API answers only an API key, and the stop goes server,
// then the stage, then the closes.
func TestServiceBootsServesAndStopsInOrder(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.New(t)
	ctx := t.Context()
	s, err := service.New(ctx, service.Options{
		Name:   "skeleton",
		Config: config.Common{Listen: "127.0.0.1:0", PostgresURL: pgtest.URL(), ShutdownTimeout: 5 * time.Second},
		Logger: slog.New(slog.DiscardHandler),
		// No registry: only the configured key.
		Keys: &keyring.Config{}, APIKeys: []string{"ns=" + testKey},
		Database: &service.Database{Schema: schema, Migrations: func() ([]migrate.Migration, error) {
			return []migrate.Migration{migrate.New(1, "things", `CREATE TABLE things (id int)`)}, nil
		}},
	})
	require.NoError(t, err)
	for _, table := range []string{"things", "audit_events"} {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n), "table %s", table)
	}

	var mu sync.Mutex
	var stops []string
	record := func(name string) {
		mu.Lock()
		defer mu.Unlock()
		stops = append(stops, name)
	}
	subscribed := make(chan struct{})
	s.ThenStop(lifecycle.Part{Name: "consumer", Ready: subscribed, Run: func(ctx context.Context) error {
		<-ctx.Done()
		record("consumer")
		return nil
	}})
	s.OnClose("publisher", func(context.Context) error { record("publisher"); return nil })
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	<-s.Server.Ready()
	base := "http://" + s.Server.Addr()

	assert.Equal(t, http.StatusServiceUnavailable, get(t, base+"/readyz"), "not ready before the consumer")
	close(subscribed)
	<-s.Ready()
	require.Eventually(t, func() bool { return get(t, base+"/readyz") == http.StatusOK }, 10*time.Second, 10*time.Millisecond)

	listAudit := base + "/cronmesh.audit.v1.AuditService/ListAuditEvents"
	assert.Equal(t, http.StatusUnauthorized, post(t, listAudit, ""), "the API needs a key")
	assert.Equal(t, http.StatusOK, post(t, listAudit, testKey), "the audit log is mounted behind the keys")

	cancel()
	require.NoError(t, <-done)
	mu.Lock()
	assert.Equal(t, []string{"consumer", "publisher"}, stops)
	mu.Unlock()
	require.Error(t, s.Pool.Ping(ctx), "the pool is closed")
}

// TestNewChecksTheKeysBeforeConnecting: a configuration mistake is
// reported as such, not as a database that cannot be reached.
func TestNewChecksTheKeysBeforeConnecting(t *testing.T) {
	t.Parallel()
	_, err := service.New(t.Context(), service.Options{
		Name:     "skeleton",
		Config:   config.Common{Listen: "127.0.0.1:0", PostgresURL: "postgres://nobody@127.0.0.1:1/none"},
		Keys:     &keyring.Config{},
		Database: &service.Database{Schema: "unused"},
	})
	require.ErrorContains(t, err, "no API keys configured")
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func post(t *testing.T, url, key string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}
