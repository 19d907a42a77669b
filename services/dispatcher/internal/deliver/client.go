package deliver

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/ssrfguard"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
)

// Defaults of [Options].
const (
	// DefaultMaxTimeout caps a job's timeout; the registry accepts at most
	// 30 minutes too (targetcheck.MaxTimeout).
	DefaultMaxTimeout = 30 * time.Minute
	// DefaultTimeout is an HTTP attempt's timeout when the job sets none
	// (the registry's default).
	DefaultTimeout = 30 * time.Second
	// DefaultAMQPTimeout bounds an AMQP attempt: waiting for a pooled
	// channel, the publish and its confirm.
	DefaultAMQPTimeout = 30 * time.Second
	// DefaultUserAgent is sent when the job sets no User-Agent header.
	DefaultUserAgent = "cronmesh-dispatcher/1"
	// DefaultMaxIdleConnsPerHost is how many keep-alive connections to one
	// target the client keeps: a busy target then costs no handshake per
	// attempt.
	DefaultMaxIdleConnsPerHost = 64
	// MaxRetryAfter clamps a target's Retry-After.
	MaxRetryAfter = time.Hour
)

// Transport limits that are not options.
const (
	dialTimeout         = 10 * time.Second
	tlsHandshakeTimeout = 10 * time.Second
	maxIdleConns        = 1024
	idleConnTimeout     = 90 * time.Second
	// maxResponseHeaderBytes bounds the memory of one response's headers,
	// which are kept in the Outcome; a larger header block fails the
	// attempt as a network error.
	maxResponseHeaderBytes = 64 << 10
	// maxDrain is how much of the body beyond the excerpt is read and
	// discarded so the keep-alive connection can be reused; a longer body
	// is cut by closing the connection instead.
	maxDrain = 256 << 10
)

// Options configures [New]. The zero value is valid: it refuses every
// non-public HTTP target and every AMQP target (no Publisher).
type Options struct {
	// AllowedNetworks are networks the SSRF guard lets through although
	// they are loopback, private, link-local or metadata addresses (tests
	// and `make dev` allow 127.0.0.0/8 and ::1/128). Allowing an IPv4
	// network also allows its IPv4-mapped IPv6 form. Each must be a valid
	// prefix; it is masked.
	AllowedNetworks []netip.Prefix
	// MaxTimeout caps a job's HTTP timeout. Default DefaultMaxTimeout; it
	// also bounds the transport's wait for response headers.
	MaxTimeout time.Duration
	// AMQPTimeout bounds one AMQP attempt (channel, publish, confirm).
	// Default DefaultAMQPTimeout.
	AMQPTimeout time.Duration
	// Publisher publishes AMQP targets. Build it with broker.NewPublisher
	// from [PublisherConfig] (topics are broker.Route(exchange, key)): that
	// config checks exchanges passively instead of declaring them and
	// carries the job's content type into the AMQP property. With nil,
	// every AMQP attempt fails as Permanent ("AMQP targets are not
	// configured"). The Client does not close it.
	Publisher message.Publisher
	// AMQPPolicy says where a request's namespace may publish
	// (targetcheck): checked again at every attempt, so that a job stored
	// before a rule, or a redrive, cannot publish into cronmesh's own
	// topology or another namespace's. Default: targetcheck's rules with no
	// internal names but "cronmesh.*" and no allow-list.
	AMQPPolicy *targetcheck.AMQPPolicy
	// TracerProvider makes the attempt's client (HTTP) or producer (AMQP)
	// span. Default: no spans (the caller's span context still travels).
	TracerProvider trace.TracerProvider
	// Propagator writes the trace context into the request headers (and
	// AMQP headers). Default propagation.TraceContext (W3C traceparent and
	// tracestate).
	Propagator propagation.TextMapPropagator
	// Clock gives the webhook-timestamp and the reference of Retry-After
	// dates. Default clock.Real. Attempt durations always use the real
	// monotonic clock.
	Clock clock.Clock
	// Logger receives SSRF refusals (Warn) and one Debug line per attempt;
	// never a secret, never a URL's query. Nil discards.
	Logger *slog.Logger
	// UserAgent is sent when the job's headers set none. Default
	// DefaultUserAgent.
	UserAgent string
	// TLSConfig, if set, is cloned for HTTPS targets (private roots in
	// tests); default: the system roots, TLS 1.2 at least.
	TLSConfig *tls.Config
	// MaxIdleConnsPerHost is the keep-alive pool per target. Default
	// DefaultMaxIdleConnsPerHost.
	MaxIdleConnsPerHost int
}

// Client makes delivery attempts: HTTP webhook calls and AMQP publishes.
// Create it with [New]. It implements [Deliverer] and is safe for
// concurrent use.
type Client struct {
	transport   *http.Transport
	publisher   message.Publisher
	tracer      trace.Tracer
	propagator  propagation.TextMapPropagator
	clock       clock.Clock
	log         *slog.Logger
	userAgent   string
	maxTimeout  time.Duration
	amqpTimeout time.Duration
	amqpPolicy  *targetcheck.AMQPPolicy
}

var _ Deliverer = (*Client)(nil)

const tracerName = "github.com/cronmesh/cronmesh/services/dispatcher/internal/deliver"

// New validates opts, applies the defaults and builds the HTTP transport:
// it never uses a proxy (a proxy would connect on our behalf, past the SSRF
// guard), dials through the guard and keeps keep-alive pools per target.
// Attempts are round trips of the transport, not calls of an http.Client:
// redirects are never followed (a 3xx is the attempt's outcome), and a
// client would only add its redirect machinery, which copies every
// request's headers in case of one. It fails on a negative duration or
// pool size and an invalid allowed network.
func New(opts Options) (*Client, error) {
	if opts.MaxTimeout < 0 || opts.AMQPTimeout < 0 || opts.MaxIdleConnsPerHost < 0 {
		return nil, errors.New("deliver: MaxTimeout, AMQPTimeout and MaxIdleConnsPerHost must not be negative")
	}
	allowed := make([]netip.Prefix, 0, len(opts.AllowedNetworks))
	for _, p := range opts.AllowedNetworks {
		if !p.IsValid() {
			return nil, fmt.Errorf("deliver: invalid allowed network %v", p)
		}
		allowed = append(allowed, p.Masked())
	}
	amqpPolicy := opts.AMQPPolicy
	if amqpPolicy == nil {
		var err error
		if amqpPolicy, err = targetcheck.NewAMQPPolicy(targetcheck.AMQPPolicyOptions{}); err != nil {
			return nil, err
		}
	}
	maxTimeout := cmp.Or(opts.MaxTimeout, DefaultMaxTimeout)

	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if opts.TLSConfig != nil {
		tlsConfig = opts.TLSConfig.Clone()
	}
	dialer := &net.Dialer{
		Timeout:        dialTimeout,
		KeepAlive:      30 * time.Second,
		ControlContext: ssrfguard.Guard{Allowed: allowed}.Control,
	}
	transport := &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		TLSClientConfig:        tlsConfig,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           maxIdleConns,
		MaxIdleConnsPerHost:    cmp.Or(opts.MaxIdleConnsPerHost, DefaultMaxIdleConnsPerHost),
		IdleConnTimeout:        idleConnTimeout,
		TLSHandshakeTimeout:    tlsHandshakeTimeout,
		ResponseHeaderTimeout:  maxTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
	c := &Client{
		transport:   transport,
		publisher:   opts.Publisher,
		propagator:  opts.Propagator,
		clock:       opts.Clock,
		log:         cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		userAgent:   cmp.Or(opts.UserAgent, DefaultUserAgent),
		maxTimeout:  maxTimeout,
		amqpTimeout: cmp.Or(opts.AMQPTimeout, DefaultAMQPTimeout),
		amqpPolicy:  amqpPolicy,
	}
	tp := opts.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	c.tracer = tp.Tracer(tracerName)
	if c.propagator == nil {
		c.propagator = propagation.TraceContext{}
	}
	if c.clock == nil {
		c.clock = clock.Real{}
	}
	return c, nil
}

// CloseIdleConnections closes the keep-alive connections to targets, for a
// graceful shutdown. Attempts in flight are unaffected, and later attempts
// open new connections.
func (c *Client) CloseIdleConnections() { c.transport.CloseIdleConnections() }

// Prepare checks req and prepares its attempt (see [Deliverer]). It never
// panics on a malformed request: a nil request, a missing execution id or
// target, or an invalid URL, method, header or signing secret gives an
// attempt that fails as Permanent with the reason, so the message goes to
// the dead-letter queue instead of looping. An attempt whose ctx is
// canceled while it is made (shutdown) is Retryable. Its Duration covers
// the making, on the monotonic clock.
func (c *Client) Prepare(ctx context.Context, req *dispatchv1.DispatchRequest) Attempt {
	var send func(context.Context) Outcome
	switch {
	case req == nil:
		send = fails(permanent("no dispatch request"))
	case req.GetExecutionId() == "":
		send = fails(permanent("dispatch request has no execution id"))
	default:
		switch t := req.GetTarget().GetKind().(type) {
		case *registryv1.Target_Http:
			send = c.prepareHTTP(ctx, req, t.Http)
		case *registryv1.Target_Amqp:
			send = func(ctx context.Context) Outcome { return c.deliverAMQP(ctx, req, t.Amqp) }
		default:
			send = fails(permanent("job has no target"))
		}
	}
	return AttemptFunc(func(ctx context.Context) Outcome {
		start := time.Now()
		out := send(ctx)
		out.Duration = time.Since(start)
		if c.log.Enabled(ctx, slog.LevelDebug) {
			c.log.DebugContext(ctx, "deliver: attempt",
				"execution_id", req.GetExecutionId(), "job_id", req.GetJobId(), "attempt", req.GetAttempt(),
				"result", out.Result.String(), "status", out.StatusCode, "reason", out.Reason, "duration", out.Duration)
		}
		return out
	})
}

// fails is the making of an attempt that cannot be made: its outcome is
// out.
func fails(out Outcome) func(context.Context) Outcome {
	return func(context.Context) Outcome { return out }
}

// String names r for logs and metrics labels.
func (r Result) String() string {
	switch r {
	case Succeeded:
		return "succeeded"
	case Retryable:
		return "retryable"
	case Permanent:
		return "permanent"
	}
	return fmt.Sprintf("Result(%d)", int(r))
}

func permanent(format string, args ...any) Outcome {
	return Outcome{Result: Permanent, Reason: fmt.Sprintf(format, args...)}
}

func retryable(format string, args ...any) Outcome {
	return Outcome{Result: Retryable, Reason: fmt.Sprintf(format, args...)}
}
