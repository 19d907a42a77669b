package pgtest

import (
	"testing"

	"github.com/cronmesh/cronmesh/libs/testkit/proxytest"
)

// Proxy is a TCP proxy (libs/testkit/proxytest) in front of the test PostgreSQL,
// for simulating a database outage from one client's point of view without
// stopping the server other tests share. Clients connect to [Proxy.URL];
// Down cuts every connection and refuses new ones until Up.
type Proxy struct {
	*proxytest.Proxy
	url string
}

// NewProxy starts a proxy on 127.0.0.1 to the host of [URL]. It starts Up
// unless down is true. t.Cleanup stops it and closes every connection.
func NewProxy(t testing.TB, down bool) *Proxy {
	t.Helper()
	p, u := proxytest.NewURL(t, URL(), "5432", down)
	return &Proxy{Proxy: p, url: u}
}

// URL is the database URL (user, database and parameters of [URL]) that
// goes through the proxy.
func (p *Proxy) URL() string { return p.url }
