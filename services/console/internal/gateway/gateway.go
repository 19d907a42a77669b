// Package gateway forwards the browser's Connect, gRPC-Web and gRPC calls
// from the console's origin to the five cronmesh services, so the SPA calls
// them with the generated clients without CORS and without the services
// being reachable from the browser.
package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
)

// Upstream is one service the console forwards to.
type Upstream struct {
	// Name is the service's short name ("registry", "history", ...); calls
	// under /api/Name/ go to it with that prefix removed, which reaches the
	// services every upstream mounts (the AuditService) on a chosen one.
	Name string
	// URL is the service's base URL, http:// (h2c) or https://.
	URL string
	// Services are the fully-qualified Connect service names forwarded to
	// it from their own path (/cronmesh.registry.v1.JobService/...).
	Services []string
}

// Route is one path pattern of the console's mux and its handler.
type Route struct {
	Pattern  string
	Upstream string // the Upstream's Name
	Handler  http.Handler
}

// Routes returns the console's forwarding routes: each upstream's service
// paths and its /api/Name/ prefix, forwarded through transport (which must
// speak HTTP/2 for gRPC: see libs/rpcclient). The request goes on as it
// came: method, path, query, body, trailers and every end-to-end header,
// the Authorization header in particular (the service authenticates the
// caller, not the console); only Cookie is dropped, since no service reads
// one and the console's origin must not leak other applications' cookies.
// A service that does not answer makes the call fail with 502, which the
// Connect clients report as UNAVAILABLE.
func Routes(upstreams []Upstream, transport http.RoundTripper, logger *slog.Logger) ([]Route, error) {
	if transport == nil {
		return nil, errors.New("gateway: a transport is required")
	}
	seen := map[string]string{}
	var routes []Route
	for _, u := range upstreams {
		if u.Name == "" || strings.ContainsAny(u.Name, "/ ") {
			return nil, fmt.Errorf("gateway: upstream name %q: a short name without '/' or spaces", u.Name)
		}
		target, err := url.Parse(u.URL)
		if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
			return nil, fmt.Errorf("gateway: %s URL %q: an http:// or https:// URL with a host", u.Name, u.URL)
		}
		if target.RawQuery != "" || target.Fragment != "" || target.User != nil {
			return nil, fmt.Errorf("gateway: %s URL %q: no query, fragment or user info", u.Name, u.URL)
		}
		proxy := newProxy(u.Name, target, transport, logger)
		prefix := "/api/" + u.Name
		routes = append(routes, Route{Pattern: prefix + "/", Upstream: u.Name, Handler: http.StripPrefix(prefix, proxy)})
		for _, svc := range u.Services {
			if other, ok := seen[svc]; ok {
				return nil, fmt.Errorf("gateway: %s is forwarded to both %s and %s", svc, other, u.Name)
			}
			seen[svc] = u.Name
			routes = append(routes, Route{Pattern: "/" + svc + "/", Upstream: u.Name, Handler: proxy})
		}
	}
	return routes, nil
}

func newProxy(name string, target *url.URL, transport http.RoundTripper, logger *slog.Logger) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			pr.Out.Header.Del("Cookie")
		},
		Transport: transport,
		// Stream responses as they come (gRPC-Web and server streams)
		// rather than buffering them.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				// The browser went away; nobody reads an answer.
				return
			}
			if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
				writeResourceExhausted(w, r)
				return
			}
			// The upstream's address stays in the log, not on the wire.
			logger.WarnContext(r.Context(), "forwarding a call failed", slog.String("upstream", name),
				slog.String("path", r.URL.Path), slog.Any("error", err))
			http.Error(w, name+" is unavailable", http.StatusBadGateway)
		},
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// writeResourceExhausted answers a call whose body passed the console's
// limit (the server's http.MaxBytesReader) as the services would, with
// RESOURCE_EXHAUSTED in the caller's protocol: grpc-status headers for gRPC
// and gRPC-Web, a Connect error body otherwise.
func writeResourceExhausted(w http.ResponseWriter, r *http.Request) {
	const message = "request body larger than the console's --max-request-bytes"
	contentType := r.Header.Get("Content-Type")
	if strings.HasPrefix(contentType, "application/grpc") {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Grpc-Status", "8")
		w.Header().Set("Grpc-Message", url.PathEscape(message))
		w.WriteHeader(http.StatusOK)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = fmt.Fprintf(w, `{"code":"resource_exhausted","message":%q}`, message)
}
