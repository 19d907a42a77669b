package ring

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// constError is an error that can be a constant (no package variables).
type constError string

func (e constError) Error() string { return string(e) }

const (
	errDeadline    constError = "ring: lease deadline passed without a successful keep-alive"
	errWatchClosed constError = "ring: watch channel closed"
)

// session is one etcd lease and everything held under it. Its ctx is
// cancelled when the session ends; end also runs the onEnd callbacks
// synchronously, before the lease is revoked.
type session struct {
	lease    clientv3.LeaseID
	ttl      time.Duration // as granted by the server
	margin   time.Duration // deadline = send time + ttl - margin
	interval time.Duration // between keep-alives: ttl/3
	joined   time.Time     // clock reading at grant, for the member value

	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	ended  bool
	nextID int
	onEnds map[int]func()
}

// margin is the safety margin subtracted from the local deadline: 10% of the
// TTL or 200 ms, whichever is larger, but at most half the TTL. The send-time
// rule already puts the deadline before the server's expiry; the margin
// absorbs what it cannot see: a difference in clock rates between this node
// and the etcd leader, and the time between noticing the deadline and every
// firing in flight checking Holds.
func margin(ttl time.Duration) time.Duration {
	return min(max(ttl/10, minMargin), ttl/2)
}

// onEnd registers f to run synchronously when the session ends (at once if
// it already has) and returns a function that unregisters it.
func (s *session) onEnd(f func()) (stop func()) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		f()
		return func() {}
	}
	id := s.nextID
	s.nextID++
	if s.onEnds == nil {
		s.onEnds = map[int]func(){}
	}
	s.onEnds[id] = f
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.onEnds, id)
		s.mu.Unlock()
	}
}

// end cancels the session's context and runs the onEnd callbacks.
func (s *session) end() {
	s.cancel()
	s.mu.Lock()
	s.ended = true
	fs := s.onEnds
	s.onEnds = nil
	s.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// isLeaseLost reports whether err means the lease no longer exists on the
// server (expired or revoked): the session must be re-created.
func isLeaseLost(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrGRPCLeaseNotFound)
}

// Run keeps a session, the membership and this node's share of the
// partitions until ctx is done, then stops firing (Owned becomes empty,
// Changes is signalled), revokes the lease so that every key it held vanishes
// at once and other nodes take over immediately, and returns nil.
//
// etcd trouble never makes it return: transient errors are retried with
// backoff and jitter; a lost lease ("lease not found") or a local deadline
// that passed without a successful keep-alive ends the session (dropping all
// ownership first, then revoking the old lease in case it still lives) and
// starts a new one, at new epochs; a broken or compacted watch re-reads the
// keys within the session, keeping what is still held. Run returns an error
// only when called a second time.
func (r *Ring) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("ring: Run called more than once")
	}
	bo := backoff{base: retryBase, max: time.Duration(r.ttlSeconds) * time.Second}
	for {
		started := r.clock.Now()
		err := r.runSession(ctx)
		if ctx.Err() != nil {
			return nil
		}
		r.metrics.restarts.Inc()
		r.log.Warn("ring: session ended, starting a new one", "err", err)
		if r.clock.Now().Sub(started) >= time.Duration(r.ttlSeconds)*time.Second {
			bo.reset() // it lived: this is a new incident
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.clock.After(bo.next()):
		}
	}
}

// runSession grants a lease and keeps the session until ctx is done or the
// session is lost, then tears it down: ownership dropped locally first,
// then the lease revoked (best effort: an unreachable etcd lets it expire).
func (r *Ring) runSession(ctx context.Context) error {
	sent := r.clock.Now()
	gctx, cancel := context.WithTimeout(ctx, opTimeout)
	g, err := r.client.Grant(gctx, r.ttlSeconds)
	cancel()
	if err != nil {
		return fmt.Errorf("grant lease: %w", err)
	}
	ttl := time.Duration(g.TTL) * time.Second
	s := &session{
		lease:    g.ID,
		ttl:      ttl,
		margin:   margin(ttl),
		interval: ttl / 3,
		joined:   sent,
	}
	s.ctx, s.cancel = context.WithCancel(ctx)

	r.mu.Lock()
	r.sess = s
	r.owned = nil
	r.deadline = sent.Add(ttl - s.margin)
	close(r.sessCh)
	r.sessCh = make(chan struct{})
	r.mu.Unlock()
	r.log.Debug("ring: session started", "lease", fmt.Sprintf("%x", int64(s.lease)), "ttl", ttl)

	errc := make(chan error, 2)
	go func() { errc <- r.keepAlive(s) }()
	go func() { errc <- r.own(s) }()
	err = <-errc

	// Stop firing before anything else, then stop the session's work, then
	// let the keys go.
	r.mu.Lock()
	dropped := len(r.owned)
	r.sess = nil
	r.owned = nil
	r.deadline = time.Time{}
	close(r.sessCh)
	r.sessCh = make(chan struct{})
	r.mu.Unlock()
	r.metrics.owned.Set(0)
	if dropped > 0 {
		r.signal()
		if ctx.Err() == nil {
			r.metrics.fenced.Add(float64(dropped))
		}
	}
	s.end()
	<-errc

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(ttl, opTimeout))
	_, rerr := r.client.Revoke(rctx, s.lease)
	cancel()
	if rerr != nil && !isLeaseLost(rerr) {
		r.log.Debug("ring: revoke lease failed; it will expire", "err", rerr)
	}
	return err
}

// minKeepAliveWait: closer than twice this to the deadline, a keep-alive is
// not worth sending.
const minKeepAliveWait = 10 * time.Millisecond

// keepAlive refreshes s's lease with KeepAliveOnce every interval and moves
// the local deadline to (clock reading before the send) + TTL − margin on
// each success. It returns nil when s ends, and an error when the lease is
// gone or the deadline passed without a successful keep-alive.
func (r *Ring) keepAlive(s *session) error {
	failing := false
	for {
		now := r.clock.Now()
		dl := r.deadlineOf(s)
		if !now.Before(dl) {
			return errDeadline
		}
		// Normally one interval; sooner when the deadline is near (a slow
		// Grant or a failing etcd left less than two intervals), so that
		// a keep-alive still has time to complete.
		wait := s.interval
		if failing {
			wait = min(retryBase, s.interval)
		}
		remaining := dl.Sub(now)
		if wait = min(wait, remaining/2); wait < minKeepAliveWait {
			wait = remaining // too late to try: let the deadline pass
		}
		select {
		case <-s.ctx.Done():
			return nil
		case <-r.clock.After(wait):
		}

		sent := r.clock.Now()
		if !sent.Before(dl) {
			return errDeadline
		}
		kctx, cancel := context.WithTimeout(s.ctx, s.interval)
		keepAliveOnce := r.client.KeepAliveOnce
		if r.keepAliveOnce != nil {
			keepAliveOnce = r.keepAliveOnce
		}
		resp, err := keepAliveOnce(kctx, s.lease)
		cancel()
		switch {
		case err == nil:
			r.setDeadline(s, sent.Add(time.Duration(resp.TTL)*time.Second-s.margin))
			failing = false
		case s.ctx.Err() != nil:
			return nil
		case isLeaseLost(err):
			return fmt.Errorf("keep-alive: %w", err)
		default:
			if !failing {
				r.log.Warn("ring: keep-alive failed, retrying", "err", err)
			}
			failing = true
		}
	}
}
