package tlsconfig_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/testkit/tlstest"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		server tlsconfig.Server
		want   error
	}{
		"none":                {tlsconfig.Server{}, nil},
		"cert and key":        {tlsconfig.Server{CertFile: "c", KeyFile: "k"}, nil},
		"mutual":              {tlsconfig.Server{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}, nil},
		"cert without key":    {tlsconfig.Server{CertFile: "c"}, tlsconfig.ErrIncompletePair},
		"key without cert":    {tlsconfig.Server{KeyFile: "k"}, tlsconfig.ErrIncompletePair},
		"client CA, no cert":  {tlsconfig.Server{ClientCAFile: "ca"}, tlsconfig.ErrClientCAWithoutCert},
		"client CA, key only": {tlsconfig.Server{KeyFile: "k", ClientCAFile: "ca"}, tlsconfig.ErrIncompletePair},
	} {
		require.ErrorIs(t, tc.server.Validate(), tc.want, name)
	}
	require.ErrorIs(t, tlsconfig.Client{CertFile: "c"}.Validate(), tlsconfig.ErrIncompletePair)
	require.ErrorIs(t, tlsconfig.Client{KeyFile: "k"}.Validate(), tlsconfig.ErrIncompletePair)
	require.NoError(t, tlsconfig.Client{CAFile: "ca"}.Validate())
}

func TestNoTLS(t *testing.T) {
	t.Parallel()
	cfg, err := tlsconfig.Server{}.Config()
	require.NoError(t, err)
	require.Nil(t, cfg)
	client, err := tlsconfig.Client{}.Config()
	require.NoError(t, err)
	require.NotNil(t, client, "etcd's client takes TLS only from a non-nil config")
	require.Nil(t, client.RootCAs, "the system's CAs")
}

// TestCertificateReloads rewrites the certificate and key files and expects
// the next handshake to use the new pair, and the old pair to stay in use
// while the files do not match each other.
func TestCertificateReloads(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "mesh")
	first := ca.Server("first")
	cfg, err := tlsconfig.Server{CertFile: first.CertFile, KeyFile: first.KeyFile}.Config()
	require.NoError(t, err)
	require.Equal(t, "first", servedName(t, cfg))

	second := ca.Server("second")
	// Half a rewrite: the new certificate beside the old key.
	copyFile(t, second.CertFile, first.CertFile, time.Now().Add(time.Minute))
	require.Equal(t, "first", servedName(t, cfg), "a mismatched pair keeps the previous one")

	copyFile(t, second.KeyFile, first.KeyFile, time.Now().Add(2*time.Minute))
	require.Equal(t, "second", servedName(t, cfg))

	// The client side reloads its certificate the same way.
	client, err := tlsconfig.Client{CertFile: first.CertFile, KeyFile: first.KeyFile}.Config()
	require.NoError(t, err)
	third := ca.Client("third")
	copyFile(t, third.CertFile, first.CertFile, time.Now().Add(3*time.Minute))
	copyFile(t, third.KeyFile, first.KeyFile, time.Now().Add(3*time.Minute))
	cert, err := client.GetClientCertificate(&tls.CertificateRequestInfo{})
	require.NoError(t, err)
	require.Equal(t, "third", commonName(t, cert))
}

func servedName(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	cert, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
	require.NoError(t, err)
	return commonName(t, cert)
}

func commonName(t *testing.T, cert *tls.Certificate) string {
	t.Helper()
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	require.NoError(t, err)
	return leaf.Subject.CommonName
}

// copyFile copies from to to and sets its modification time to mtime, so
// the change is seen whatever the file system's time granularity.
func copyFile(t *testing.T, from, to string, mtime time.Time) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o600))
	require.NoError(t, os.Chtimes(to, mtime, mtime))
}
