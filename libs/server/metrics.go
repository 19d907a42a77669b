package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
)

// metricsInterceptor records Prometheus metrics for Connect handler calls
// (clients are passed through untouched):
//
//	rpc_server_requests_total{procedure,code}
//	rpc_server_request_duration_seconds{procedure}
//
// code is the Connect code name ("not_found", ...) or "ok". procedure is
// bounded by the mounted services, so cardinality stays small.
type metricsInterceptor struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetricsInterceptor(reg prometheus.Registerer) (*metricsInterceptor, error) {
	requests, err := registerOrExisting(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rpc_server_requests_total",
		Help: "Connect/gRPC requests handled, by procedure and result code.",
	}, []string{"procedure", "code"}))
	if err != nil {
		return nil, err
	}
	duration, err := registerOrExisting(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rpc_server_request_duration_seconds",
		Help:    "Duration of Connect/gRPC requests handled, by procedure.",
		Buckets: prometheus.DefBuckets,
	}, []string{"procedure"}))
	if err != nil {
		return nil, err
	}
	return &metricsInterceptor{requests: requests, duration: duration}, nil
}

// registerOrExisting registers c, or returns the identical collector already
// registered, so several Servers can share one registry.
func registerOrExisting[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("register request metrics: %w", err)
}

func (m *metricsInterceptor) observe(procedure string, err error, start time.Time) {
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
	}
	m.requests.WithLabelValues(procedure, code).Inc()
	m.duration.WithLabelValues(procedure).Observe(time.Since(start).Seconds())
}

// WrapUnary implements connect.Interceptor.
func (m *metricsInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		start := time.Now()
		res, err := next(ctx, req)
		m.observe(req.Spec().Procedure, err, start)
		return res, err
	}
}

// WrapStreamingClient implements connect.Interceptor; clients are not measured.
func (m *metricsInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor; a stream counts once,
// when it ends.
func (m *metricsInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		err := next(ctx, conn)
		m.observe(conn.Spec().Procedure, err, start)
		return err
	}
}
