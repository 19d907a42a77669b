package keyring

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/rpcclient"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

// DefaultRegistryURL is the registry of `make dev`.
const DefaultRegistryURL = "http://127.0.0.1:8081"

// Config is how a service gets the managed keys: from the registry at
// RegistryURL, every Refresh, calling with RegistryAPIKey.
type Config struct {
	// RegistryURL is the registry's base URL (--registry-url,
	// CRONMESH_REGISTRY_URL).
	RegistryURL string
	// RegistryAPIKey is the configured (bootstrap) key sent to the registry
	// (--registry-api-key, CRONMESH_REGISTRY_API_KEY); empty means the first
	// --api-keys entry given as a plain key rather than a digest.
	RegistryAPIKey string
	// Refresh is the interval between refreshes (--key-refresh,
	// CRONMESH_KEY_REFRESH).
	Refresh time.Duration
	// RegistryTLS is how an https RegistryURL is trusted, and the client
	// certificate shown when the registry asks for one
	// (--registry-ca-file, --registry-client-cert, --registry-client-key).
	RegistryTLS tlsconfig.Client
}

// RegisterAPIKeys adds --api-keys, the configured keys, to fs: keys is the
// service's list of entries (a config.StringList), which ParseConfigured
// and Config.NewRegistryRing read.
func RegisterAPIKeys(fs *flag.FlagSet, keys flag.Value) {
	fs.Var(keys, "api-keys", "comma-separated API keys, each namespace=key or namespace=sha256:<hex digest of the key>, admin of the namespace; namespace:editor=... or namespace:viewer=... for a lesser role")
}

// RegisterRefresh adds --key-refresh to fs: all the registry itself needs,
// since it reads the keys from its own database.
func (c *Config) RegisterRefresh(fs *flag.FlagSet) {
	fs.DurationVar(&c.Refresh, "key-refresh", DefaultInterval, "how often the managed API keys are refreshed (a revoked key is refused within about this long)")
}

// Register adds --registry-url, --registry-api-key and --key-refresh to fs.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.RegistryURL, "registry-url", DefaultRegistryURL, "base URL of the registry, which hands out the managed API keys")
	fs.StringVar(&c.RegistryAPIKey, "registry-api-key", "", "configured (bootstrap admin) key to fetch the managed API keys with (default: the first plain admin key of --api-keys)")
	fs.StringVar(&c.RegistryTLS.CAFile, "registry-ca-file", "", "PEM CA certificates an https --registry-url must chain to (default: the system's)")
	fs.StringVar(&c.RegistryTLS.CertFile, "registry-client-cert", "", "PEM client certificate for a registry that requires one (mutual TLS)")
	fs.StringVar(&c.RegistryTLS.KeyFile, "registry-client-key", "", "PEM key of --registry-client-cert")
	c.RegisterRefresh(fs)
}

// HTTPClient is the client that fetches the managed keys: HTTP/2 over TLS
// to an https RegistryURL (trusting RegistryTLS), h2c to an http one.
func (c Config) HTTPClient() (*http.Client, error) {
	client, err := rpcclient.NewHTTPClient(c.RegistryTLS)
	if err != nil {
		return nil, fmt.Errorf("--registry-ca-file, --registry-client-cert, --registry-client-key: %w", err)
	}
	return client, nil
}

// ParseConfigured parses the --api-keys entries (see apikey.Parse) and
// refuses an empty list: without a bootstrap key no managed key can ever be
// created, and no service could fetch them.
func ParseConfigured(entries []string) (*apikey.Keys, error) {
	keys, err := apikey.Parse(entries)
	if err != nil {
		return nil, err
	}
	if keys.Len() == 0 {
		return nil, errors.New("no API keys configured (--api-keys or CRONMESH_API_KEYS): at least one bootstrap admin key is needed")
	}
	return keys, nil
}

// NewRegistryRing returns the Ring of a service other than the registry:
// the configured keys of apiKeys (the --api-keys entries) and the managed
// keys fetched from the registry with httpClient. An empty RegistryURL
// (blanked on purpose: the flag has a default) leaves only the configured
// keys, as in tests of a single service.
func (c Config) NewRegistryRing(apiKeys []string, httpClient *http.Client, logger *slog.Logger, metrics prometheus.Registerer) (*Ring, error) {
	configured, err := ParseConfigured(apiKeys)
	if err != nil {
		return nil, err
	}
	if c.RegistryURL == "" {
		if logger != nil {
			logger.Warn("no --registry-url: only the configured API keys are accepted, managed keys are not")
		}
		return New(Options{Configured: configured, Source: noManagedKeys{}, Interval: c.Refresh, Logger: logger, Metrics: metrics})
	}
	key := c.RegistryAPIKey
	if key == "" {
		key = firstAdminKey(apiKeys)
	}
	if key == "" {
		return nil, errors.New("no key to fetch the managed API keys with: give --registry-api-key, or one --api-keys entry as a plain key")
	}
	return New(Options{
		Configured: configured,
		Source:     NewRegistrySource(httpClient, c.RegistryURL, key),
		Interval:   c.Refresh,
		Logger:     logger,
		Metrics:    metrics,
	})
}

// firstAdminKey returns the key of the first admin entry ("namespace=key"
// or "namespace:admin=key") whose key is not a "sha256:" digest; "" when
// there is none.
func firstAdminKey(entries []string) string {
	for _, entry := range entries {
		grantee, secret, ok := strings.Cut(strings.TrimSpace(entry), "=")
		// Only an admin may fetch the keys: "namespace" or "namespace:admin",
		// never "namespace:editor" or "namespace:viewer".
		if _, role, hasRole := strings.Cut(grantee, ":"); hasRole && apikey.Role(role) != apikey.RoleAdmin {
			continue
		}
		if ok && secret != "" && !strings.HasPrefix(secret, "sha256:") {
			return secret
		}
	}
	return ""
}

// noManagedKeys is the Source of a Ring without a registry.
type noManagedKeys struct{}

func (noManagedKeys) KeyDigests(context.Context, int64) (*registryv1.ListKeyDigestsResponse, error) {
	return &registryv1.ListKeyDigestsResponse{Unchanged: true}, nil
}
