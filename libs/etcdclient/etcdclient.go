// Package etcdclient builds a service's etcd client from its settings
// (config.Common's --etcd-* flags): the members, TLS to them, and a user and
// password when etcd's authentication is on.
package etcdclient

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

// DefaultDialTimeout bounds New's first connection when Options leave it 0.
const DefaultDialTimeout = 5 * time.Second

// Options say how to reach etcd.
type Options struct {
	// Endpoints are the members, "host:port" or "https://host:port".
	Endpoints []string
	// TLS names the CA the members' certificates chain to and, for
	// certificate authentication, the client's certificate and key. The
	// connection uses TLS when any of them is set or an endpoint is an
	// https:// URL (then the system's CAs without a CAFile).
	TLS tlsconfig.Client
	// Username and Password authenticate the client when etcd's auth is
	// enabled; empty Username: no authentication by password.
	Username string
	Password string
	// DialTimeout bounds the first connection; 0 means DefaultDialTimeout.
	DialTimeout time.Duration
	// Logger is the etcd client's own logger; nil is the client's default
	// (JSON to stderr). zap.NewNop() silences it.
	Logger *zap.Logger
}

// FromConfig returns the Options of the common flags.
func FromConfig(c config.Common) Options {
	return Options{Endpoints: c.EtcdEndpoints, TLS: c.EtcdTLS, Username: c.EtcdUsername, Password: c.EtcdPassword}
}

// Config returns the clientv3.Config of o. It fails when no endpoint is
// given, when a password comes without a user, or when a TLS file cannot be
// read.
func Config(o Options) (clientv3.Config, error) {
	if len(o.Endpoints) == 0 {
		return clientv3.Config{}, errors.New("etcd: no endpoints")
	}
	if o.Password != "" && o.Username == "" {
		return clientv3.Config{}, errors.New("etcd: a password without a username")
	}
	cfg := clientv3.Config{
		Endpoints:   o.Endpoints,
		DialTimeout: cmp.Or(o.DialTimeout, DefaultDialTimeout),
		Username:    o.Username,
		Password:    o.Password,
		Logger:      o.Logger,
	}
	if o.TLS != (tlsconfig.Client{}) || anyHTTPS(o.Endpoints) {
		tlsConfig, err := o.TLS.Config()
		if err != nil {
			return clientv3.Config{}, fmt.Errorf("etcd TLS: %w", err)
		}
		cfg.TLS = tlsConfig
	}
	return cfg, nil
}

// New returns a client of o's cluster once connected (or after DialTimeout
// with an error). Authentication failures (a wrong password) come back here.
func New(o Options) (*clientv3.Client, error) {
	cfg, err := Config(o)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", o.Endpoints, err)
	}
	return cli, nil
}

func anyHTTPS(endpoints []string) bool {
	for _, e := range endpoints {
		if strings.HasPrefix(e, "https://") {
			return true
		}
	}
	return false
}
