// Package rpcclient builds the HTTP client that calls cronmesh services
// (cronctl, and any service or tool calling another), so every caller speaks
// to a listener of libs/server the same way: HTTP/2 over TLS to an https://
// endpoint, unencrypted HTTP/2 (h2c) to an http:// one, one client for both.
package rpcclient

import (
	"errors"
	"net/http"

	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

// NewHTTPClient returns an *http.Client for Connect and gRPC calls to cronmesh
// services. https:// endpoints are reached over HTTP/2 with TLS, verified
// against files.CAFile (the system's CAs when empty) and presenting
// files.CertFile when the server asks for a certificate (mutual TLS); http://
// endpoints over h2c. HTTP/1.1 is never used: a server or proxy that speaks
// only HTTP/1.1 fails the call, which gRPC could not use anyway. Timeouts of
// dialing, TLS handshakes and idle connections, and proxies from the
// environment (HTTPS_PROXY, NO_PROXY; never for loopback), are those of
// http.DefaultTransport; a call's own deadline comes from its context. It
// fails when files is not valid or a file cannot be read.
func NewHTTPClient(files tlsconfig.Client) (*http.Client, error) {
	tlsConfig, err := files.Config()
	if err != nil {
		return nil, err
	}
	base, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return nil, errors.New("rpcclient: http.DefaultTransport is not an *http.Transport")
	}
	transport := base.Clone()
	transport.TLSClientConfig = tlsConfig
	transport.Protocols = new(http.Protocols)
	transport.Protocols.SetHTTP2(true)
	transport.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: transport}, nil
}
