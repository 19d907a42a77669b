package service_test

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/keyring"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/service"
)

// TestRegisterFlags: the common flags with the service's listen address
// and the small request limit by default, the configured keys and the
// keyring's flags.
func TestRegisterFlags(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("svc", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var common config.Common
	var apiKeys config.StringList
	var keys keyring.Config
	service.RegisterFlags(fs, &common, "127.0.0.1:9999", &apiKeys, &keys)
	require.NoError(t, fs.Parse([]string{"--api-keys", "ns=key-0123456789abcdef", "--registry-url", "http://registry:8081"}))
	require.Equal(t, "127.0.0.1:9999", common.Listen)
	require.Equal(t, server.SmallAPIMaxRequestBytes, common.Limits.MaxRequestBytes)
	require.Equal(t, config.StringList{"ns=key-0123456789abcdef"}, apiKeys)
	require.Equal(t, "http://registry:8081", keys.RegistryURL)
}
