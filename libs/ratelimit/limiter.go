package ratelimit

import (
	"cmp"
	"container/list"
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/quota"
)

// QuotaName is the quota label of rate limit refusals in
// quota_refusals_total.
const QuotaName = "requests_per_second"

// Options for New.
type Options struct {
	// Clock drives the buckets' refill; nil means the system clock.
	Clock clock.Clock
	// Refusals counts refused requests; may be nil.
	Refusals *quota.Refusals
}

// Limiter holds a token bucket per API key, at most Config.MaxKeys of them:
// beyond, the least recently used is evicted. An evicted key starts again
// with a full bucket, which only matters when more keys than that are
// active at once. Safe for concurrent use.
type Limiter struct {
	cfg      Config
	maxKeys  int
	clock    clock.Clock
	refusals *quota.Refusals

	mu      sync.Mutex
	buckets map[string]*list.Element // of *bucket, by key id
	recency *list.List               // most recently used first
}

type bucket struct {
	keyID   string
	limiter *rate.Limiter
}

// New returns a Limiter for cfg, or an error when cfg is not valid.
func New(cfg Config, opts Options) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Limiter{
		cfg:      cfg,
		maxKeys:  cmp.Or(cfg.MaxKeys, DefaultMaxKeys),
		clock:    cmp.Or[clock.Clock](opts.Clock, clock.Real{}),
		refusals: opts.Refusals,
		buckets:  map[string]*list.Element{},
		recency:  list.New(),
	}, nil
}

// Allow takes a token from p's bucket and returns 0, or, when the bucket is
// empty, takes nothing and returns how long until a token is there (at
// least a millisecond). The bucket is keyed on p.KeyID (on the namespace for
// a principal without one) and refills at p's namespace's rate.
func (l *Limiter) Allow(p apikey.Principal) time.Duration {
	r := l.cfg.rateFor(p.Namespace)
	if r.Unlimited() {
		return 0
	}
	key := cmp.Or(p.KeyID, "namespace:"+p.Namespace)

	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now() // under the lock: readings reach buckets in order
	lim := l.bucket(key, r)
	if lim.AllowN(now, 1) {
		return 0
	}
	missing := 1 - lim.TokensAt(now)
	wait := time.Duration(math.Ceil(missing / r.PerSecond * float64(time.Second)))
	// Whole milliseconds, rounded up: a client that waits exactly this long
	// finds its token there.
	return max((wait + time.Millisecond - 1).Truncate(time.Millisecond), time.Millisecond)
}

// bucket returns key's limiter, creating it full and evicting the least
// recently used beyond maxKeys. Called with mu held.
func (l *Limiter) bucket(key string, r Rate) *rate.Limiter {
	if e, ok := l.buckets[key]; ok {
		l.recency.MoveToFront(e)
		return e.Value.(*bucket).limiter
	}
	for l.recency.Len() >= l.maxKeys {
		oldest := l.recency.Back()
		l.recency.Remove(oldest)
		delete(l.buckets, oldest.Value.(*bucket).keyID)
	}
	lim := rate.NewLimiter(rate.Limit(r.PerSecond), r.Burst) // full
	l.buckets[key] = l.recency.PushFront(&bucket{keyID: key, limiter: lim})
	return lim
}

// Len is the number of buckets held.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// Interceptor returns the Connect interceptor that admits or refuses each
// handler call (a stream counts once, when it opens) by the caller's key.
// Calls without an authenticated principal pass: they only reach a handler
// when authentication is not wired, which the handlers refuse themselves.
func (l *Limiter) Interceptor() connect.Interceptor { return interceptor{l} }

type interceptor struct{ l *Limiter }

func (i interceptor) check(ctx context.Context) error {
	p, ok := apikey.PrincipalFrom(ctx)
	if !ok {
		return nil
	}
	wait := i.l.Allow(p)
	if wait == 0 {
		return nil
	}
	i.l.refusals.Add(p.Namespace, QuotaName)
	return refusal(p, i.l.cfg.rateFor(p.Namespace), wait)
}

// refusal is RESOURCE_EXHAUSTED with the wait as a RetryInfo detail and a
// Retry-After header (whole seconds, rounded up, as HTTP has it).
func refusal(p apikey.Principal, r Rate, wait time.Duration) error {
	err := quota.Exhausted(p.Namespace, fmt.Sprintf(
		"rate limit of API key %s exceeded (%s requests per second, burst %d); retry in %s",
		p.KeyID, strconv.FormatFloat(r.PerSecond, 'f', -1, 64), r.Burst, wait))
	if detail, derr := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); derr == nil {
		err.AddDetail(detail)
	}
	err.Meta().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
	return err
}

// WrapUnary implements connect.Interceptor.
func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		if err := i.check(ctx); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

// WrapStreamingClient implements connect.Interceptor; clients pass.
func (i interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor.
func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := i.check(ctx); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
