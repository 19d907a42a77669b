package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/services/cronctl/internal/config"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestResolvePrecedence(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	dir := filepath.Join(home, ".config", "cronmesh")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cronctl.yaml"), []byte(
		"registryUrl: http://file:1\ntriggerUrl: http://file:2\ndispatcherUrl: http://file:3\napiKey: file-key-0123456789\ntimeout: 5s\n"), 0o600))

	tests := []struct {
		name    string
		flags   config.Flags
		env     map[string]string
		wantReg string
		wantKey string
		source  string
	}{
		{"file over default", config.Flags{}, nil, "http://file:1", "file-key-0123456789", config.SourceFile},
		{"env over file", config.Flags{}, map[string]string{config.EnvRegistryURL: "http://env:1", config.EnvAPIKey: "env-key-0123456789"}, "http://env:1", "env-key-0123456789", config.SourceEnv},
		{"flag over env", config.Flags{RegistryURL: "http://flag:1", APIKey: "flag-key-0123456789"}, map[string]string{config.EnvRegistryURL: "http://env:1", config.EnvAPIKey: "env-key-0123456789"}, "http://flag:1", "flag-key-0123456789", config.SourceFlag},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Resolve(tc.flags, envOf(tc.env), home)
			require.NoError(t, err)
			require.Equal(t, tc.wantReg, cfg.RegistryURL)
			require.Equal(t, tc.wantKey, cfg.APIKey)
			require.Equal(t, tc.source, cfg.Sources["registryUrl"])
			require.Equal(t, 5*time.Second, cfg.Timeout)
			require.Equal(t, "http://file:2", cfg.TriggerURL)
		})
	}
}

func TestResolveDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := config.Resolve(config.Flags{}, nil, t.TempDir())
	require.NoError(t, err)
	require.Equal(t, config.DefaultRegistryURL, cfg.RegistryURL)
	require.Equal(t, config.DefaultTriggerURL, cfg.TriggerURL)
	require.Equal(t, config.DefaultDispatcherURL, cfg.DispatcherURL)
	require.Equal(t, "http://127.0.0.1:8084", cfg.HistoryURL, "make dev's history")
	require.Equal(t, "http://127.0.0.1:8085", cfg.AlertingURL, "make dev's alerting")
	require.Equal(t, "table", cfg.Output)
	require.Empty(t, cfg.APIKey)
	require.Empty(t, cfg.File)
}

// TestResolveHistoryAndAlerting: the two newer endpoints follow the same
// precedence as the others.
func TestResolveHistoryAndAlerting(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "cronctl.yaml")
	require.NoError(t, os.WriteFile(file, []byte("historyUrl: http://file:4\nalertingUrl: http://file:5\n"), 0o600))
	cfg, err := config.Resolve(config.Flags{ConfigPath: file}, nil, "")
	require.NoError(t, err)
	require.Equal(t, "http://file:4", cfg.HistoryURL)
	require.Equal(t, "http://file:5", cfg.AlertingURL)
	require.Equal(t, config.SourceFile, cfg.Sources["historyUrl"])

	cfg, err = config.Resolve(config.Flags{ConfigPath: file, AlertingURL: "http://flag:5"},
		envOf(map[string]string{config.EnvHistoryURL: "http://env:4", config.EnvAlertingURL: "http://env:5"}), "")
	require.NoError(t, err)
	require.Equal(t, "http://env:4", cfg.HistoryURL)
	require.Equal(t, config.SourceEnv, cfg.Sources["historyUrl"])
	require.Equal(t, "http://flag:5", cfg.AlertingURL)
	require.Equal(t, config.SourceFlag, cfg.Sources["alertingUrl"])
	view := cfg.View()
	require.Equal(t, "http://env:4", view.HistoryURL)
	require.Equal(t, "http://flag:5", view.AlertingURL)
}

func TestResolveErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	misspelled := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(misspelled, []byte("registry: http://x\napiKey: do-not-print-0123456789\n"), 0o600))
	tests := []struct {
		name  string
		flags config.Flags
		want  string
	}{
		{"unknown key", config.Flags{ConfigPath: misspelled}, "registry"},
		{"missing named file", config.Flags{ConfigPath: filepath.Join(dir, "nope.yaml")}, "no such file"},
		{"bad output", config.Flags{Output: "xml"}, "want table, json or yaml"},
		{"bad timeout", config.Flags{Timeout: "soon"}, "positive Go duration"},
		{"bad url", config.Flags{RegistryURL: "127.0.0.1:8081"}, "http:// or https://"},
		{"bad history url", config.Flags{HistoryURL: "127.0.0.1:8084"}, "historyUrl"},
		{"bad alerting url", config.Flags{AlertingURL: "127.0.0.1:8085"}, "alertingUrl"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Resolve(tc.flags, nil, "")
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "do-not-print")
		})
	}
}

func TestConfigNeverShowsTheKey(t *testing.T) {
	t.Parallel()
	cfg, err := config.Resolve(config.Flags{APIKey: "secret-key-0123456789"}, nil, "")
	require.NoError(t, err)
	require.Equal(t, config.Redacted, cfg.View().APIKey)
	for _, s := range []string{cfg.String(), cfg.GoString()} {
		require.NotContains(t, s, "secret-key")
		require.Contains(t, s, config.Redacted)
	}
}
