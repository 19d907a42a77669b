package amqptest

import (
	"testing"

	"github.com/cronmesh/cronmesh/libs/testkit/proxytest"
)

// Proxy is a TCP proxy (libs/testkit/proxytest) in front of RabbitMQ for simulating
// broker outages from a client's point of view without disturbing other
// tests that share the broker. Clients connect to [Proxy.URL]; Down cuts
// every connection and refuses new ones until Up; Sever cuts the current
// connections but keeps accepting.
type Proxy struct {
	*proxytest.Proxy
	url string
}

// NewProxy starts a proxy on 127.0.0.1 to the host of [URL]. It starts Up
// unless down is true. t.Cleanup stops it and closes every connection.
func NewProxy(t testing.TB, down bool) *Proxy {
	t.Helper()
	p, u := proxytest.NewURL(t, URL(), "5672", down)
	return &Proxy{Proxy: p, url: u}
}

// URL is the AMQP URL (credentials and vhost of [URL]) that goes through the
// proxy.
func (p *Proxy) URL() string { return p.url }
