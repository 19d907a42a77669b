package ring

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// kv is the ring's knowledge of one key as of revision modRev. Deleted keys
// are kept as tombstones (present false) so that an older event arriving
// after a newer local write (our own transaction's result) is recognised as
// stale and ignored.
type kv struct {
	present   bool
	value     string
	createRev int64
	modRev    int64
	lease     int64
}

func kvOf(k *mvccpb.KeyValue) kv {
	return kv{present: true, value: string(k.Value), createRev: k.CreateRevision, modRev: k.ModRevision, lease: k.Lease}
}

// view is the ring's copy of the members and owner keys, fed by an initial
// read, the watch and our own transactions' results.
type view map[string]kv

// apply records x for key unless what we know is as new or newer.
func (v view) apply(key string, x kv) {
	if old, ok := v[key]; ok && x.modRev <= old.modRev {
		return
	}
	v[key] = x
}

// memberValue is the JSON value of a member key.
type memberValue struct {
	Address  string    `json:"address"`
	JoinTime time.Time `json:"join_time"`
}

// relevant reports whether the view tracks key (members and owner keys, not
// elections).
func (r *Ring) relevant(key string) bool {
	if strings.HasPrefix(key, r.membersPrefix()) {
		return true
	}
	_, ok := r.parsePartition(key)
	return ok
}

// own keeps this node's membership and partitions for session s until it
// ends (nil) or the lease is lost (error). Other failures re-read the keys
// and carry on without touching what is held.
func (r *Ring) own(s *session) error {
	bo := backoff{base: retryBase, max: s.ttl}
	held := map[int]int64{}
	for {
		err := r.sync(s, held, &bo)
		if s.ctx.Err() != nil {
			return nil
		}
		if isLeaseLost(err) {
			return err
		}
		r.log.Warn("ring: re-reading the ring", "err", err)
		select {
		case <-s.ctx.Done():
			return nil
		case <-r.clock.After(bo.next()):
		}
	}
}

// sync reads the ring, then watches it from the read's revision, reconciling
// held with the desired ownership after every change, until s ends (nil), the
// lease is lost, or the read or the watch fails (compacted, cancelled,
// closed).
func (r *Ring) sync(s *session, held map[int]int64, bo *backoff) error {
	gctx, cancel := context.WithTimeout(s.ctx, opTimeout)
	resp, err := r.client.Get(gctx, r.prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return fmt.Errorf("read ring: %w", err)
	}
	v := view{}
	for _, k := range resp.Kvs {
		if key := string(k.Key); r.relevant(key) {
			v.apply(key, kvOf(k))
		}
	}

	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
	defer wcancel()
	wch := r.client.Watch(wctx, r.prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	var retry <-chan time.Time
	for {
		if err := r.reconcile(s, v, held); err != nil {
			if isLeaseLost(err) || s.ctx.Err() != nil {
				return err
			}
			r.log.Warn("ring: reconcile failed, retrying", "err", err)
			retry = r.clock.After(bo.next())
		} else {
			retry = nil
			bo.reset()
		}
		select {
		case <-s.ctx.Done():
			return nil
		case <-retry:
		case wr, ok := <-wch:
			if !ok {
				return errWatchClosed
			}
			if err := wr.Err(); err != nil {
				return fmt.Errorf("watch: %w", err)
			}
			for _, ev := range wr.Events {
				key := string(ev.Kv.Key)
				if !r.relevant(key) {
					continue
				}
				switch ev.Type {
				case mvccpb.PUT:
					v.apply(key, kvOf(ev.Kv))
				case mvccpb.DELETE:
					v.apply(key, kv{modRev: ev.Kv.ModRevision})
				}
			}
		}
	}
}

// members returns the sorted ids of the members in v.
func (r *Ring) members(v view) []string {
	var ids []string
	for key, k := range v {
		if id, ok := strings.CutPrefix(key, r.membersPrefix()); ok && k.present {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// reconcile moves held towards the desired state given v: register our
// member key if missing; drop partitions whose key is no longer ours at
// their epoch (taken away) or that are assigned elsewhere; publish that
// before deleting any key; delete our keys that we do not hold; acquire the
// assigned partitions whose key is free. Keys held by another node are left
// alone: their deletion will come as a watch event and a new reconcile.
func (r *Ring) reconcile(s *session, v view, held map[int]int64) error {
	lease := int64(s.lease)
	if m := v[r.memberKey()]; !m.present || m.lease != lease {
		if err := r.putMember(s, v); err != nil {
			return err
		}
	}
	members := r.members(v)
	assigned := make([]bool, r.partitions)
	for p := range assigned {
		assigned[p] = Assign(members, p) == r.nodeID
	}

	fenced := 0
	for p, epoch := range held {
		k := v[r.partitionKey(p)]
		switch {
		case !k.present || k.value != r.nodeID || k.createRev != epoch || k.lease != lease:
			delete(held, p)
			fenced++
		case !assigned[p]:
			delete(held, p)
		}
	}
	var release, acquire []int
	for p := range r.partitions {
		if _, ok := held[p]; ok {
			continue
		}
		k := v[r.partitionKey(p)]
		switch {
		case k.present && k.value == r.nodeID && k.lease == lease && assigned[p]:
			// Ours under this lease but not held: an acquisition whose
			// reply we lost. The key is as good as a fresh one.
			held[p] = k.createRev
		case k.present && k.value == r.nodeID:
			// Ours but not to keep: handed over, or left by an earlier
			// session whose lease could not be revoked.
			release = append(release, p)
		case !k.present && assigned[p]:
			acquire = append(acquire, p)
		}
	}
	if fenced > 0 {
		r.metrics.fenced.Add(float64(fenced))
		r.log.Warn("ring: partitions taken away", "count", fenced)
	}
	r.publish(s, held) // stop firing before any key goes

	err := errors.Join(r.release(s, v, release), r.acquire(s, v, held, acquire))
	r.publish(s, held)
	if err != nil {
		return err
	}
	for p, a := range assigned {
		if _, ok := held[p]; a && !ok {
			return nil
		}
	}
	r.markReady()
	return nil
}

// putMember registers this node under s's lease.
func (r *Ring) putMember(s *session, v view) error {
	val, err := json.Marshal(memberValue{Address: r.address, JoinTime: s.joined.UTC()})
	if err != nil {
		return fmt.Errorf("encode member: %w", err)
	}
	ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
	defer cancel()
	resp, err := r.client.Put(ctx, r.memberKey(), string(val), clientv3.WithLease(s.lease))
	if err != nil {
		return fmt.Errorf("register member: %w", err)
	}
	v.apply(r.memberKey(), kv{present: true, value: string(val), modRev: resp.Header.Revision, lease: int64(s.lease)})
	return nil
}

// commitEach commits, in one transaction bounded by opTimeout, the nested
// transaction txn builds for the owner key of each partition of chunk, and
// returns their results in chunk's order with the revision.
func (r *Ring) commitEach(s *session, chunk []int, txn func(key string) clientv3.Op) ([]*etcdserverpb.TxnResponse, int64, error) {
	ops := make([]clientv3.Op, len(chunk))
	for i, p := range chunk {
		ops[i] = txn(r.partitionKey(p))
	}
	ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
	resp, err := r.client.Txn(ctx).Then(ops...).Commit()
	cancel()
	if err != nil {
		return nil, 0, err
	}
	subs := make([]*etcdserverpb.TxnResponse, len(chunk))
	for i := range chunk {
		subs[i] = resp.Responses[i].GetResponseTxn()
	}
	return subs, resp.Header.Revision, nil
}

// release deletes the owner keys of ps that are still ours at the epoch v
// knows, batchSize partitions per transaction (one nested transaction each,
// so one partition's compare failing does not stop the others).
func (r *Ring) release(s *session, v view, ps []int) error {
	for chunk := range slices.Chunk(ps, batchSize) {
		subs, rev, err := r.commitEach(s, chunk, func(key string) clientv3.Op {
			return clientv3.OpTxn(
				[]clientv3.Cmp{
					clientv3.Compare(clientv3.Value(key), "=", r.nodeID),
					clientv3.Compare(clientv3.CreateRevision(key), "=", v[key].createRev),
				},
				[]clientv3.Op{clientv3.OpDelete(key)},
				[]clientv3.Op{clientv3.OpGet(key)},
			)
		})
		if err != nil {
			return fmt.Errorf("release partitions: %w", err)
		}
		for i, p := range chunk {
			key := r.partitionKey(p)
			sub := subs[i]
			if kvs := sub.GetResponses()[0].GetResponseRange().GetKvs(); !sub.GetSucceeded() && len(kvs) > 0 {
				v.apply(key, kvOf(kvs[0]))
			} else {
				v.apply(key, kv{modRev: rev})
			}
		}
	}
	return nil
}

// acquire creates the owner keys of ps under s's lease where they do not
// exist, adding the ones it got to held with the transaction's revision as
// epoch; a key that exists is recorded in v and waited for.
func (r *Ring) acquire(s *session, v view, held map[int]int64, ps []int) error {
	lease := int64(s.lease)
	for chunk := range slices.Chunk(ps, batchSize) {
		subs, rev, err := r.commitEach(s, chunk, func(key string) clientv3.Op {
			return clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
				[]clientv3.Op{clientv3.OpPut(key, r.nodeID, clientv3.WithLease(s.lease))},
				[]clientv3.Op{clientv3.OpGet(key)},
			)
		})
		if err != nil {
			return fmt.Errorf("acquire partitions: %w", err)
		}
		for i, p := range chunk {
			key := r.partitionKey(p)
			sub := subs[i]
			if sub.GetSucceeded() {
				held[p] = rev
				v.apply(key, kv{present: true, value: r.nodeID, createRev: rev, modRev: rev, lease: lease})
				continue
			}
			kvs := sub.GetResponses()[0].GetResponseRange().GetKvs()
			if len(kvs) == 0 { // cannot happen: the compare said it exists
				continue
			}
			k := kvOf(kvs[0])
			v.apply(key, k)
			if k.value == r.nodeID && k.lease == lease {
				held[p] = k.createRev
				continue
			}
			r.metrics.conflicts.Inc()
		}
	}
	return nil
}
