package ring

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Campaign runs fn while this node is the elected leader of name, for
// singleton work such as sweeps. The election is etcd's usual one (see lead)
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
// is done, within opTimeout even when etcd is unreachable (every etcd call
// it makes is bounded), and may be called several times, for different names
// or the same. Leadership is not re-checked while fn runs: deleting the
// election key by hand does not stop fn. Like every etcd election, this is
// mutual exclusion only as good as fn's respect for its ctx; fence writes
// where it matters.
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
//
// The election is etcd's usual one, key for key what
// concurrency.Election writes (so nodes of either kind agree on the
// leader): each candidate puts Prefix+"election/<name>/<lease in hex>" with
// its lease, and the candidate whose key has the lowest create revision
// leads. It is written here rather than with concurrency.Election because
// that one, when its context ends while it waits, resigns on the client's
// own context, which nothing but closing the client ends: with etcd
// unreachable, a node told to stop would retry that delete forever. Here
// every etcd call is bounded by opTimeout or by a context that ends with
// ctx or the session.
func (r *Ring) lead(ctx context.Context, s *session, name string, fn func(context.Context)) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer s.onEnd(cancel)()

	prefix := r.prefix + "election/" + name + "/"
	key := fmt.Sprintf("%s%x", prefix, int64(s.lease))
	rev, err := r.enterElection(cctx, key, s.lease)
	if err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	// resign deletes the key, unless the session ended: the key then goes
	// with the lease, which Run revokes (or etcd expires).
	resign := func() error {
		if s.ctx.Err() != nil {
			return nil
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		defer rcancel()
		_, err := r.client.Txn(rctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
		if err != nil {
			return fmt.Errorf("resign: %w", err)
		}
		return nil
	}
	if err := r.waitForTurn(cctx, prefix, rev); err != nil {
		return errors.Join(fmt.Errorf("campaign: %w", err), resign())
	}
	r.log.Info("ring: elected", "election", name)
	fn(cctx)
	return resign()
}

// enterElection puts key (this node's candidacy) with lease unless it
// exists already, and returns its create revision.
func (r *Ring) enterElection(ctx context.Context, key string, lease clientv3.LeaseID) (int64, error) {
	tctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	resp, err := r.client.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, r.nodeID, clientv3.WithLease(lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return 0, err
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	// Another Campaign of this node for the same name, in the same
	// session: the node is one candidate, whichever call entered first.
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return 0, errors.New("election key vanished while entering")
	}
	return kvs[0].CreateRevision, nil
}

// waitForTurn returns once no candidate created before rev is left under
// prefix, or with ctx's error.
func (r *Ring) waitForTurn(ctx context.Context, prefix string, rev int64) error {
	for {
		gctx, cancel := context.WithTimeout(ctx, opTimeout)
		resp, err := r.client.Get(gctx, prefix, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1))...)
		cancel()
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		if err := r.waitForDelete(ctx, string(resp.Kvs[0].Key), resp.Header.Revision); err != nil {
			return err
		}
	}
}

// waitForDelete returns once key is deleted at or after rev, or with ctx's
// error.
func (r *Ring) waitForDelete(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range r.client.Watch(wctx, key, clientv3.WithRev(rev)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("watch closed while waiting for the leader to go")
}
