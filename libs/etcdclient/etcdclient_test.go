package etcdclient_test

import (
	"cmp"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/cronmesh/cronmesh/libs/etcdclient"
	"github.com/cronmesh/cronmesh/libs/testkit/etcdtest"
	"github.com/cronmesh/cronmesh/libs/testkit/tlstest"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

func TestConfig(t *testing.T) {
	t.Parallel()
	plain, err := etcdclient.Config(etcdclient.Options{Endpoints: []string{"etcd:2379"}})
	require.NoError(t, err)
	require.Nil(t, plain.TLS, "no TLS file, no https endpoint: plaintext, as before")
	require.Empty(t, plain.Username)
	require.Equal(t, etcdclient.DefaultDialTimeout, plain.DialTimeout)

	https, err := etcdclient.Config(etcdclient.Options{Endpoints: []string{"https://etcd:2379"}})
	require.NoError(t, err)
	require.NotNil(t, https.TLS, "an https endpoint turns TLS on, with the system's CAs")
	require.Nil(t, https.TLS.RootCAs)

	ca := tlstest.NewCA(t, "etcd")
	pair := ca.Client("trigger")
	full, err := etcdclient.Config(etcdclient.Options{
		Endpoints: []string{"etcd:2379"},
		TLS:       tlsconfig.Client{CAFile: ca.CertFile, CertFile: pair.CertFile, KeyFile: pair.KeyFile},
		Username:  "trigger", Password: "s3cret",
	})
	require.NoError(t, err)
	require.NotNil(t, full.TLS.RootCAs)
	require.NotNil(t, full.TLS.GetClientCertificate)
	require.Equal(t, "trigger", full.Username)
	require.Equal(t, "s3cret", full.Password)

	for name, o := range map[string]etcdclient.Options{
		"no endpoint":             {},
		"password without user":   {Endpoints: []string{"etcd:2379"}, Password: "p"},
		"certificate without key": {Endpoints: []string{"etcd:2379"}, TLS: tlsconfig.Client{CertFile: pair.CertFile}},
		"missing CA file":         {Endpoints: []string{"etcd:2379"}, TLS: tlsconfig.Client{CAFile: ca.CertFile + ".missing"}},
	} {
		_, err := etcdclient.Config(o)
		require.Error(t, err, name)
	}
}

// TestTLSAndAuthentication runs etcd with TLS, client certificates and
// authentication on, as a production cluster would, and connects to it
// with the trigger's settings.
func TestTLSAndAuthentication(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "etcd")
	serverPair := ca.Server("etcd")
	cluster := etcdtest.NewTLS(t, etcdtest.ClientTLS{CertFile: serverPair.CertFile, KeyFile: serverPair.KeyFile, ClientCAFile: ca.CertFile})
	clientPair := ca.Client("trigger")
	trusted := tlsconfig.Client{CAFile: ca.CertFile, CertFile: clientPair.CertFile, KeyFile: clientPair.KeyFile}
	opts := func(o etcdclient.Options) etcdclient.Options {
		o.Endpoints = cluster.Endpoints()
		o.DialTimeout = cmp.Or(o.DialTimeout, 20*time.Second)
		o.Logger = zap.NewNop()
		return o
	}

	admin, err := etcdclient.New(opts(etcdclient.Options{TLS: trusted}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	etcdtest.EnableAuth(t, admin, "trigger", "s3cret", "/cronmesh/")

	trigger, err := etcdclient.New(opts(etcdclient.Options{TLS: trusted, Username: "trigger", Password: "s3cret"}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = trigger.Close() })
	_, err = trigger.Put(t.Context(), "/cronmesh/trigger/x", "1")
	require.NoError(t, err)
	_, err = trigger.Put(t.Context(), "/elsewhere", "1")
	require.Error(t, err, "the trigger user's role covers only its prefix")

	stranger := ca.Client("stranger")
	refused := map[string]etcdclient.Options{
		"wrong password": {TLS: trusted, Username: "trigger", Password: "guess"},
		// etcd takes a certificate's common name as the user when no
		// password is given: a name that is no user is refused.
		"no password, certificate of no user": {TLS: tlsconfig.Client{CAFile: ca.CertFile, CertFile: stranger.CertFile, KeyFile: stranger.KeyFile}},
		"no client certificate":               {TLS: tlsconfig.Client{CAFile: ca.CertFile}, Username: "trigger", Password: "s3cret"},
		"another CA":                          {TLS: tlsconfig.Client{CAFile: tlstest.NewCA(t, "other").CertFile, CertFile: clientPair.CertFile, KeyFile: clientPair.KeyFile}, Username: "trigger", Password: "s3cret"},
	}
	for name, o := range refused {
		o.DialTimeout = 2 * time.Second // each waits all of it
		require.Error(t, putWith(t, opts(o)), name)
	}
}

// putWith connects with o and writes a key the trigger may write.
func putWith(t *testing.T, o etcdclient.Options) error {
	t.Helper()
	cli, err := etcdclient.New(o)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err = cli.Put(ctx, "/cronmesh/trigger/y", "1")
	return err
}
