package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/testkit/tlstest"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

// newH2CServer starts an httptest server that speaks h2c besides HTTP/1.1,
// as cronmesh's services do: cronctl calls http:// URLs over h2c only.
func newH2CServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// startHistoryTLS serves the fake history through libs/server with files,
// and returns its https:// URL.
func startHistoryTLS(t *testing.T, files tlsconfig.Server) string {
	t.Helper()
	srv, err := server.New(server.Options{Name: "history", Listen: "127.0.0.1:0", TLS: files})
	require.NoError(t, err)
	path, h := historyv1connect.NewHistoryServiceHandler(&fakeHistory{})
	srv.Handle(historyv1connect.HistoryServiceName, path, h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	<-srv.Ready()
	return "https://" + srv.Addr()
}

func runWithEnv(t *testing.T, vars map[string]string, args ...string) (string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Run(t.Context(), args, Env{
		Stdout: &stdout, Stderr: &stderr,
		LookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok },
		ReadFile:  os.ReadFile,
	})
	return stdout.String() + stderr.String(), code
}

func TestCallsOverMutualTLS(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "mesh")
	pair := ca.Server("history")
	url := startHistoryTLS(t, tlsconfig.Server{CertFile: pair.CertFile, KeyFile: pair.KeyFile, ClientCAFile: ca.CertFile})
	cert := ca.Client("cronctl")
	env := map[string]string{"CRONMESH_HISTORY_URL": url, "CRONMESH_API_KEY": "unit-key-0123456789", "CRONMESH_CA_FILE": ca.CertFile}

	out, code := runWithEnv(t, env, "history", "list", "--job", "J", "--client-cert", cert.CertFile, "--client-key", cert.KeyFile)
	require.Equal(t, ExitOK, code, out)

	withEnvCert := map[string]string{"CRONMESH_CLIENT_CERT": cert.CertFile, "CRONMESH_CLIENT_KEY": cert.KeyFile}
	for k, v := range env {
		withEnvCert[k] = v
	}
	out, code = runWithEnv(t, withEnvCert, "history", "list", "--job", "J")
	require.Equal(t, ExitOK, code, out)

	out, code = runWithEnv(t, env, "history", "list", "--job", "J")
	require.Equal(t, ExitError, code, out)
	require.Contains(t, out, "unauthenticated", "no client certificate")

	out, code = runWithEnv(t, env, "history", "list", "--job", "J", "--ca-file", tlstest.NewCA(t, "other").CertFile,
		"--client-cert", cert.CertFile, "--client-key", cert.KeyFile)
	require.Equal(t, ExitError, code, out)
	require.Contains(t, out, "certificate signed by unknown authority")

	out, code = runWithEnv(t, env, "history", "list", "--job", "J", "--client-cert", cert.CertFile)
	require.Equal(t, ExitError, code, out)
	require.Contains(t, out, "clientCert (from flag) and clientKey (from default) go together")
}
