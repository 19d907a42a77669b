package ring

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// Campaign runs fn while this node is the elected leader of name, for
// singleton work such as sweeps. The election is a concurrency.Election
// under Prefix+"election/"+name on the ring's own lease, so leadership never
// outlives ownership: fn's ctx is cancelled when ctx is done or the ring's
// session ends (lease lost, local deadline passed, Run stopping), and the
// session's end cancels it before the lease is revoked, so a successor is
// elected only after. When a new session starts, Campaign campaigns again.
// If fn returns on its own while still leader, Campaign resigns and, after a
// backoff (growing up to the lease TTL if it keeps happening), campaigns
// again; fn may then run here or elsewhere.
//
// It needs Run to be running (it waits for a session), returns nil when ctx
// is done, and may be called several times, for different names or the
// same. Leadership is not re-checked while fn runs: deleting the election
// key by hand does not stop fn. Like every etcd election, this is mutual
// exclusion only as good as fn's respect for its ctx; fence writes where it
// matters.
func (r *Ring) Campaign(ctx context.Context, name string, fn func(ctx context.Context)) error {
	if name == "" || fn == nil {
		return errors.New("ring: Campaign needs a name and a function")
	}
	bo := backoff{base: retryBase, max: time.Duration(r.ttlSeconds) * time.Second}
	for {
		s, changed := r.currentSession()
		if s == nil {
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
				continue
			}
		}
		err := r.lead(ctx, s, name, fn)
		switch {
		case ctx.Err() != nil:
			return nil
		case s.ctx.Err() != nil:
			continue // the session ended: wait for the next one
		case err != nil:
			r.log.Warn("ring: campaign failed, retrying", "election", name, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.clock.After(bo.next()):
		}
	}
}

// lead campaigns for name in session s and runs fn once elected.
func (r *Ring) lead(ctx context.Context, s *session, name string, fn func(context.Context)) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer s.onEnd(cancel)()

	cs, err := concurrency.NewSession(r.client, concurrency.WithLease(s.lease), concurrency.WithContext(cctx))
	if err != nil {
		return fmt.Errorf("election session: %w", err)
	}
	// Never cs.Close(): it would revoke the ring's lease. The concurrency
	// session also keeps the lease alive (client.KeepAlive) while it
	// exists; that only delays the server's expiry, while the ring's own
	// deadline, which decides, still comes from its own keep-alives.
	defer cs.Orphan()
	e := concurrency.NewElection(cs, r.prefix+"election/"+name)
	if err := e.Campaign(cctx, r.nodeID); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	r.log.Info("ring: elected", "election", name)
	fn(cctx)
	if s.ctx.Err() == nil { // otherwise the key goes with the lease
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		defer rcancel()
		if err := e.Resign(rctx); err != nil {
			return fmt.Errorf("resign: %w", err)
		}
	}
	return nil
}
