package postgres_test

import (
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/postgres"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/libs/testkit/tlstest"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

// sslRequestCode is the PostgreSQL protocol's SSLRequest, which a client
// sends before a TLS handshake.
const sslRequestCode = 80877103

// tlsFront answers PostgreSQL's SSLRequest and terminates TLS with files in
// front of the test server, as a server with ssl=on would, and returns its
// "host:port".
func tlsFront(t *testing.T, files tlsconfig.Server) string {
	t.Helper()
	cfg, err := files.Config()
	require.NoError(t, err)
	server, err := url.Parse(pgtest.URL())
	require.NoError(t, err)
	return tlstest.Front(t, cfg, server.Host, func(conn net.Conn) bool {
		var req [8]byte
		if _, err := io.ReadFull(conn, req[:]); err != nil || binary.BigEndian.Uint32(req[4:]) != sslRequestCode {
			return false // only TLS clients here
		}
		_, err := conn.Write([]byte{'S'})
		return err == nil
	})
}

// frontURL is the test database's URL through the front at addr, with
// sslmode and sslrootcert as the Helm chart writes them.
func frontURL(t *testing.T, addr, sslmode, caFile string) string {
	t.Helper()
	u, err := url.Parse(pgtest.URL())
	require.NoError(t, err)
	q := u.Query()
	q.Set("sslmode", sslmode)
	q.Set("sslrootcert", caFile)
	u.Host, u.RawQuery = addr, q.Encode()
	return u.String()
}

// TestVerifiedTLS: the chart's default, sslmode=verify-full with the CA
// file in the URL, connects; a server certificate from another CA, or one
// that does not name the host, is refused.
func TestVerifiedTLS(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "postgres")
	pair := ca.Server("postgres")
	addr := tlsFront(t, tlsconfig.Server{CertFile: pair.CertFile, KeyFile: pair.KeyFile})

	connect := func(rawURL string) error {
		if err := postgres.EnsureDatabase(t.Context(), rawURL); err != nil {
			return err
		}
		pool, err := postgres.Connect(t.Context(), postgres.Options{URL: rawURL, Schema: "public"})
		if err != nil {
			return err
		}
		defer pool.Close()
		_, err = pool.Exec(t.Context(), "SELECT 1")
		return err
	}
	require.NoError(t, connect(frontURL(t, addr, "verify-full", ca.CertFile)))

	err := connect(frontURL(t, addr, "verify-full", tlstest.NewCA(t, "other").CertFile))
	require.ErrorContains(t, err, "certificate signed by unknown authority")

	// verify-full checks the name too, verify-ca only the chain.
	named := ca.Server("db", "db.internal")
	misnamed := tlsFront(t, tlsconfig.Server{CertFile: named.CertFile, KeyFile: named.KeyFile})
	require.ErrorContains(t, connect(frontURL(t, misnamed, "verify-full", ca.CertFile)), "cannot validate certificate for 127.0.0.1")
	require.NoError(t, connect(frontURL(t, misnamed, "verify-ca", ca.CertFile)))
}
