package rpcclient_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/rpcclient"
	"github.com/cronmesh/cronmesh/libs/testkit/tlstest"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

// TestPlainHTTPIsH2C: an http:// endpoint is called over HTTP/2 without TLS
// (prior knowledge), as gRPC needs; the TLS side is tested with libs/server.
func TestPlainHTTPIsH2C(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(r.Proto))
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)

	c, err := rpcclient.NewHTTPClient(tlsconfig.Client{})
	require.NoError(t, err)
	t.Cleanup(c.CloseIdleConnections)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	res, err := c.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 2, res.ProtoMajor)
}

func TestBadFilesRefused(t *testing.T) {
	t.Parallel()
	pair := tlstest.NewCA(t, "mesh").Client("cronctl")
	for name, files := range map[string]tlsconfig.Client{
		"certificate without key": {CertFile: pair.CertFile},
		"missing CA":              {CAFile: pair.CertFile + ".missing"},
		"CA file without a cert":  {CAFile: pair.KeyFile},
	} {
		_, err := rpcclient.NewHTTPClient(files)
		require.Error(t, err, name)
	}
}
