package keyring

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/authn"
	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/clock"
)

// DefaultInterval is how often a Ring asks for changes: a revoked key is
// refused everywhere within about this long (the promise is 5 s), and an
// unchanged set costs the registry one row read per service replica per
// interval.
const DefaultInterval = time.Second

// Source hands out the accepted secrets of managed keys: the registry's
// store in the registry, a KeyService client (NewRegistrySource) elsewhere.
type Source interface {
	// KeyDigests returns every accepted secret at the current revision, or
	// only the revision and Unchanged when that is knownRevision.
	KeyDigests(ctx context.Context, knownRevision int64) (*registryv1.ListKeyDigestsResponse, error)
}

// Options configure a Ring.
type Options struct {
	// Configured are the keys of --api-keys: always accepted, each as the
	// admin of its namespace (the bootstrap keys). Required.
	Configured *apikey.Keys
	// Source provides the managed keys. Required.
	Source Source
	// Interval between refreshes; 0 means DefaultInterval.
	Interval time.Duration
	// Clock decides when a rotated-out secret's grace period is over, and
	// paces Run. Default the real clock.
	Clock clock.Clock
	// Logger receives refresh failures and recoveries. Nil discards.
	Logger *slog.Logger
	// Metrics, when set, receives keyring_revision,
	// keyring_last_refresh_timestamp_seconds and
	// keyring_refresh_errors_total.
	Metrics prometheus.Registerer
}

// Ring authenticates API keys against the configured keys and an in-memory
// copy of the managed keys, which Run keeps fresh. When the source cannot be
// reached the last copy keeps serving: a registry outage does not lock
// every client out, at the price that a key revoked during the outage works
// until the registry is back (docs/adr/0009-managed-api-keys.md).
// Safe for concurrent use.
type Ring struct {
	configured *apikey.Keys
	source     Source
	interval   time.Duration
	clock      clock.Clock
	logger     *slog.Logger
	metrics    metrics

	set     atomic.Pointer[keySet]
	refresh sync.Mutex // one Refresh at a time: the set never goes back in revision
	failing atomic.Bool
}

// keySet is one revision of the managed keys, never changed once built.
type keySet struct {
	revision int64
	byDigest map[[sha256.Size]byte]entry
}

type entry struct {
	principal apikey.Principal
	// expires is the end of a previous secret's grace period; zero for a
	// current secret.
	expires time.Time
}

// New returns a Ring holding only the configured keys until its first
// refresh.
func New(opts Options) (*Ring, error) {
	if opts.Configured == nil || opts.Source == nil {
		return nil, errors.New("keyring: Configured and Source are required")
	}
	if opts.Interval < 0 {
		return nil, fmt.Errorf("keyring: Interval %s is negative", opts.Interval)
	}
	m, err := newMetrics(opts.Metrics)
	if err != nil {
		return nil, err
	}
	r := &Ring{
		configured: opts.Configured,
		source:     opts.Source,
		interval:   cmp.Or(opts.Interval, DefaultInterval),
		clock:      cmp.Or[clock.Clock](opts.Clock, clock.Real{}),
		logger:     cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		metrics:    m,
	}
	r.set.Store(&keySet{})
	return r, nil
}

// Revision is the revision of the managed keys held; 0 before the first
// successful refresh.
func (r *Ring) Revision() int64 { return r.set.Load().revision }

// Refresh asks the source for changes once and installs them. On error the
// keys held stay as they were.
func (r *Ring) Refresh(ctx context.Context) error {
	r.refresh.Lock()
	defer r.refresh.Unlock()
	held := r.set.Load()
	resp, err := r.source.KeyDigests(unsampled(ctx), held.revision)
	if err != nil {
		r.metrics.errors.Inc()
		return err
	}
	r.metrics.lastRefresh.Set(float64(r.clock.Now().UnixNano()) / 1e9)
	if resp.GetUnchanged() {
		return nil
	}
	next := &keySet{revision: resp.GetRevision(), byDigest: make(map[[sha256.Size]byte]entry, len(resp.GetDigests()))}
	for _, d := range resp.GetDigests() {
		role, ok := RoleFromProto(d.GetRole())
		if len(d.GetSha256()) != sha256.Size || !ok || d.GetNamespace() == "" || d.GetKeyId() == "" {
			// A malformed entry grants nothing; the rest still apply.
			r.logger.WarnContext(ctx, "ignoring a malformed key digest", slog.String("key_id", d.GetKeyId()))
			continue
		}
		var digest [sha256.Size]byte
		copy(digest[:], d.GetSha256())
		e := entry{principal: apikey.Principal{Namespace: d.GetNamespace(), KeyID: d.GetKeyId(), Role: role}}
		if d.GetExpireTime() != nil {
			e.expires = d.GetExpireTime().AsTime()
		}
		next.byDigest[digest] = e
	}
	r.set.Store(next)
	r.metrics.revision.Set(float64(next.revision))
	return nil
}

// Run refreshes at once and then every Interval until ctx is done, and
// returns nil. Failures are logged (once per outage, and the
// recovery) and retried at the next tick; they never stop Run.
func (r *Ring) Run(ctx context.Context) error {
	for {
		err := r.Refresh(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !r.failing.Swap(true):
			r.logger.WarnContext(ctx, "cannot refresh the managed API keys; serving the last known set",
				slog.Int64("revision", r.Revision()), slog.Any("error", err))
		case err == nil && r.failing.Swap(false):
			r.logger.InfoContext(ctx, "managed API keys refreshed again", slog.Int64("revision", r.Revision()))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.clock.After(r.interval):
		}
	}
}

// Authenticate returns the principal of secret: a configured key has the
// role it is configured with (admin unless it says otherwise); a managed key has its own role, and a previous
// secret of a rotated key only until its grace period ends. The lookup is by
// digest, so its time does not depend on how much of a wrong secret matches
// a right one.
func (r *Ring) Authenticate(secret string) (apikey.Principal, bool) {
	if p, ok := r.configured.Principal(secret); ok {
		return p, true
	}
	e, ok := r.set.Load().byDigest[apikey.Digest(secret)]
	if !ok || (!e.expires.IsZero() && !r.clock.Now().Before(e.expires)) {
		return apikey.Principal{}, false
	}
	return e.principal, true
}

// Middleware returns HTTP middleware that rejects requests without a valid
// "Authorization: Bearer <key>" header with the Connect/gRPC code
// Unauthenticated, and records the key's principal for
// apikey.PrincipalFrom. It is what every service mounts in place of
// apikey.Keys.Middleware.
func (r *Ring) Middleware() *authn.Middleware {
	return authn.NewMiddleware(func(_ context.Context, req *http.Request) (any, error) {
		secret, ok := authn.BearerToken(req)
		if !ok {
			return nil, authn.Errorf("missing bearer API key")
		}
		p, ok := r.Authenticate(secret)
		if !ok {
			return nil, authn.Errorf("invalid API key")
		}
		return p, nil
	})
}

// unsampled returns ctx inside a trace that is not sampled: a refresh every
// second on every replica would otherwise put a trace per second and replica
// (the registry's RPC span, its database queries) into the tracing backend,
// drowning the traces of executions. Samplers that follow the parent (the
// services') record none of it.
func unsampled(ctx context.Context) context.Context {
	var ids [24]byte
	_, _ = rand.Read(ids[:])
	var cfg trace.SpanContextConfig
	copy(cfg.TraceID[:], ids[:16])
	copy(cfg.SpanID[:], ids[16:])
	return trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(cfg))
}

// NewRegistrySource returns a Source that calls the registry's
// KeyService.ListKeyDigests at baseURL with key, one of the configured
// (bootstrap) keys: the registry refuses a managed key there. opts are
// added to the client (tracing, protocol).
func NewRegistrySource(httpClient connect.HTTPClient, baseURL, key string, opts ...connect.ClientOption) Source {
	opts = append(opts, connect.WithInterceptors(bearer(key)))
	return registrySource{client: registryv1connect.NewKeyServiceClient(httpClient, baseURL, opts...)}
}

type registrySource struct {
	client registryv1connect.KeyServiceClient
}

func (s registrySource) KeyDigests(ctx context.Context, knownRevision int64) (*registryv1.ListKeyDigestsResponse, error) {
	// A hung registry must not hold the refresh loop past its next tick by
	// much: bound each call.
	ctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	resp, err := s.client.ListKeyDigests(ctx, connect.NewRequest(&registryv1.ListKeyDigestsRequest{KnownRevision: knownRevision}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// refreshTimeout bounds one call to the registry.
const refreshTimeout = 5 * time.Second

// bearer sends key, and the caller's trace context (see unsampled), so that
// the registry does not record the call.
func bearer(key string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+key)
			propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header()))
			return next(ctx, req)
		}
	}
}

type metrics struct {
	revision, lastRefresh prometheus.Gauge
	errors                prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (metrics, error) {
	m := metrics{
		revision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "keyring_revision",
			Help: "Revision of the managed API keys this process holds (0 before the first refresh).",
		}),
		lastRefresh: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "keyring_last_refresh_timestamp_seconds",
			Help: "When the managed API keys were last refreshed from the registry: a stale value means revocations are not arriving.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "keyring_refresh_errors_total",
			Help: "Failed refreshes of the managed API keys (the last known set keeps serving).",
		}),
	}
	return m, m.register(reg)
}

// register registers m on reg unless it is nil; on failure nothing stays
// registered.
func (m metrics) register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	var registered []prometheus.Collector
	for _, c := range []prometheus.Collector{m.revision, m.lastRefresh, m.errors} {
		if err := reg.Register(c); err != nil {
			for _, done := range registered {
				reg.Unregister(done)
			}
			return fmt.Errorf("keyring: register metrics: %w", err)
		}
		registered = append(registered, c)
	}
	return nil
}

// RegisterMetrics registers the Ring's metrics (see Options.Metrics) on reg,
// for a service that builds its Ring before its metrics registry.
func (r *Ring) RegisterMetrics(reg prometheus.Registerer) error { return r.metrics.register(reg) }
