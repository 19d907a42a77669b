package server_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/cronmesh/cronmesh/libs/rpcclient"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/testkit/tlstest"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

// startTLS runs a server with the echo service and opts.TLS, whose handlers
// answer with the request's protocol in the X-Proto header, and returns its
// https:// URL.
func startTLS(t *testing.T, files tlsconfig.Server) string {
	t.Helper()
	srv, err := server.New(server.Options{Name: "tls", Listen: "127.0.0.1:0", TLS: files})
	require.NoError(t, err)
	srv.Handle(testService, testPath, newEchoService().handler(srv.HandlerOptions()...))
	srv.UseMiddleware(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Proto", r.Proto)
			next.ServeHTTP(w, r)
		})
	})
	srv.SetServing(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("Run failed before listening: %v", err)
	}
	return "https://" + srv.Addr()
}

// client returns the shared cronmesh HTTP client for files, its idle
// connections closed at cleanup so the server's shutdown need not wait.
func client(t *testing.T, files tlsconfig.Client) *http.Client {
	t.Helper()
	c, err := rpcclient.NewHTTPClient(files)
	require.NoError(t, err)
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func echo(t *testing.T, c *http.Client, url string, opts ...connect.ClientOption) (*connect.Response[wrapperspb.StringValue], error) {
	t.Helper()
	return connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](c, url+echoProcedure, opts...).
		CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("over tls")))
}

// probed is what the tests read of a probe's response, whose body probe
// has closed.
type probed struct{ StatusCode, ProtoMajor int }

func probe(t *testing.T, c *http.Client, url string) probed {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	res, err := c.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	return probed{res.StatusCode, res.ProtoMajor}
}

func TestTLSServesHTTP2(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "mesh")
	pair := ca.Server("registry")
	url := startTLS(t, tlsconfig.Server{CertFile: pair.CertFile, KeyFile: pair.KeyFile})
	c := client(t, tlsconfig.Client{CAFile: ca.CertFile})

	for name, opts := range map[string][]connect.ClientOption{
		"connect": nil,
		"grpc":    {connect.WithGRPC()},
	} {
		res, err := echo(t, c, url, opts...)
		require.NoError(t, err, name)
		require.Equal(t, "over tls", res.Msg.GetValue(), name)
		require.Equal(t, "HTTP/2.0", res.Header().Get("X-Proto"), "%s: h2 negotiated by ALPN", name)
	}

	// HTTP/1.1 over TLS stays available (ALPN), for curl and browsers.
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: mustClientConfig(t, tlsconfig.Client{CAFile: ca.CertFile})}}
	t.Cleanup(h1.CloseIdleConnections)
	res := probe(t, h1, url+"/healthz")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, 1, res.ProtoMajor)

	// No plaintext beside TLS: an h2c caller is refused.
	_, err := echo(t, client(t, tlsconfig.Client{}), "http"+url[len("https"):])
	require.Error(t, err)
}

func TestTLSClientWithAnotherCAFails(t *testing.T) {
	t.Parallel()
	pair := tlstest.NewCA(t, "mesh").Server("registry")
	url := startTLS(t, tlsconfig.Server{CertFile: pair.CertFile, KeyFile: pair.KeyFile})

	_, err := echo(t, client(t, tlsconfig.Client{CAFile: tlstest.NewCA(t, "other").CertFile}), url)
	require.ErrorContains(t, err, "certificate signed by unknown authority")
	_, err = echo(t, client(t, tlsconfig.Client{}), url)
	require.ErrorContains(t, err, "certificate signed by unknown authority", "the system's CAs do not know a private CA")
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "mesh")
	pair := ca.Server("registry")
	url := startTLS(t, tlsconfig.Server{CertFile: pair.CertFile, KeyFile: pair.KeyFile, ClientCAFile: ca.CertFile})

	withCert := ca.Client("cronctl")
	res, err := echo(t, client(t, tlsconfig.Client{CAFile: ca.CertFile, CertFile: withCert.CertFile, KeyFile: withCert.KeyFile}), url, connect.WithGRPC())
	require.NoError(t, err)
	require.Equal(t, "HTTP/2.0", res.Header().Get("X-Proto"))

	noCert := client(t, tlsconfig.Client{CAFile: ca.CertFile})
	for name, opts := range map[string][]connect.ClientOption{"connect": nil, "grpc": {connect.WithGRPC()}} {
		_, err = echo(t, noCert, url, opts...)
		require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "%s: %v", name, err)
	}
	// The health service and metrics are not probes: they need the
	// certificate too.
	require.Equal(t, http.StatusUnauthorized, probe(t, noCert, url+"/metrics").StatusCode)
	// The kubelet presents no certificate: the probes answer it.
	require.Equal(t, http.StatusOK, probe(t, noCert, url+"/healthz").StatusCode)
	require.Equal(t, http.StatusOK, probe(t, noCert, url+"/readyz").StatusCode)

	// A certificate from another CA fails the handshake itself.
	stranger := tlstest.NewCA(t, "other").Client("cronctl")
	_, err = echo(t, client(t, tlsconfig.Client{CAFile: ca.CertFile, CertFile: stranger.CertFile, KeyFile: stranger.KeyFile}), url)
	require.Error(t, err)
	require.NotEqual(t, connect.CodeUnauthenticated, connect.CodeOf(err), "refused by the handshake, before any request: %v", err)
}

func TestTLSOptionsRefused(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "mesh")
	pair := ca.Server("registry")
	for name, tc := range map[string]struct {
		files tlsconfig.Server
		want  string
	}{
		"cert without key":     {tlsconfig.Server{CertFile: pair.CertFile}, tlsconfig.ErrIncompletePair.Error()},
		"key without cert":     {tlsconfig.Server{KeyFile: pair.KeyFile}, tlsconfig.ErrIncompletePair.Error()},
		"client CA alone":      {tlsconfig.Server{ClientCAFile: ca.CertFile}, tlsconfig.ErrClientCAWithoutCert.Error()},
		"missing cert file":    {tlsconfig.Server{CertFile: pair.CertFile + ".missing", KeyFile: pair.KeyFile}, "no such file"},
		"key of another cert":  {tlsconfig.Server{CertFile: pair.CertFile, KeyFile: ca.Server("other").KeyFile}, "private key does not match"},
		"client CA not a cert": {tlsconfig.Server{CertFile: pair.CertFile, KeyFile: pair.KeyFile, ClientCAFile: pair.KeyFile}, "no PEM certificate"},
	} {
		_, err := server.New(server.Options{Name: "tls", Listen: "127.0.0.1:0", TLS: tc.files})
		require.ErrorContains(t, err, tc.want, name)
	}
}

func mustClientConfig(t *testing.T, files tlsconfig.Client) *tls.Config {
	t.Helper()
	cfg, err := files.Config()
	require.NoError(t, err)
	return cfg
}
