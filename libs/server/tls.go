package server

import (
	"crypto/tls"
	"net"
	"net/http"

	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

// tlsHandler returns the listener's TLS configuration (nil without TLS) and
// the handler to serve mux with. With a client CA, the TLS handshake verifies
// any certificate a client presents but lets a client without one through
// (tls.VerifyClientCertIfGiven), and requireClientCert refuses its requests:
// that way the kubelet, which presents no certificate, can still probe
// /healthz and /readyz, and Kubernetes' readiness keeps working under mutual
// TLS.
func tlsHandler(files tlsconfig.Server, mux *http.ServeMux) (*tls.Config, http.Handler, error) {
	cfg, err := files.Config()
	if err != nil || cfg == nil {
		return nil, mux, err
	}
	if cfg.ClientCAs == nil {
		return cfg, mux, nil
	}
	cfg.ClientAuth = tls.VerifyClientCertIfGiven
	return cfg, requireClientCert(mux), nil
}

// requireClientCert answers 401 Unauthorized (Unauthenticated to Connect and
// gRPC clients) to a request whose connection has no verified client
// certificate, except the probes /healthz and /readyz, which reveal nothing
// but liveness and readiness.
func requireClientCert(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		verified := r.TLS != nil && len(r.TLS.VerifiedChains) > 0
		if !verified && r.URL.Path != "/healthz" && r.URL.Path != "/readyz" {
			http.Error(w, "client certificate required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serve serves ln with srv, over TLS when configured. ServeTLS adds h2 and
// http/1.1 to the ALPN protocols of srv's Protocols.
func (s *Server) serve(srv *http.Server, ln net.Listener) error {
	if s.tls == nil {
		return srv.Serve(ln)
	}
	srv.TLSConfig = s.tls
	return srv.ServeTLS(ln, "", "")
}
