package ring

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// State is the ring as stored in etcd at one revision.
type State struct {
	// Partitions is P.
	Partitions int
	// Members are the live members, sorted by NodeID.
	Members []Member
	// Owners has one entry per partition (index = partition): the node
	// holding its owner key, or the zero Owner when none does (between
	// owners during a handover, or while nobody is up).
	Owners []Owner
}

// Member is one registered node.
type Member struct {
	// NodeID is the member's Options.NodeID.
	NodeID string
	// Address is its Options.Address ("" if unset or unreadable).
	Address string
	// JoinTime is when the node's current session started (by its clock);
	// zero if its member value is unreadable.
	JoinTime time.Time
}

// Owner is the holder of one partition's owner key.
type Owner struct {
	// NodeID is the holder, "" when the key does not exist.
	NodeID string
	// Epoch is the key's CreateRevision, 0 when it does not exist.
	Epoch int64
}

// Snapshot reads members and owner keys from etcd in one transaction (so
// both are from the same revision), for the API and for tests. It reflects
// etcd, not this node's local view: a node may have stopped firing a
// partition whose key still names it (during a handover or before its lease
// expires). Malformed member values are reported with what is known; keys
// of partitions outside [0, P) are ignored.
func (r *Ring) Snapshot(ctx context.Context) (State, error) {
	resp, err := r.client.Txn(ctx).Then(
		clientv3.OpGet(r.membersPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(r.partitionsPrefix(), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return State{}, fmt.Errorf("ring: snapshot: %w", err)
	}
	st := State{Partitions: r.partitions, Owners: make([]Owner, r.partitions)}
	for _, k := range resp.Responses[0].GetResponseRange().GetKvs() {
		m := Member{NodeID: strings.TrimPrefix(string(k.Key), r.membersPrefix())}
		var mv memberValue
		if json.Unmarshal(k.Value, &mv) == nil {
			m.Address, m.JoinTime = mv.Address, mv.JoinTime
		}
		st.Members = append(st.Members, m)
	}
	slices.SortFunc(st.Members, func(a, b Member) int { return strings.Compare(a.NodeID, b.NodeID) })
	for _, k := range resp.Responses[1].GetResponseRange().GetKvs() {
		if p, ok := r.parsePartition(string(k.Key)); ok {
			st.Owners[p] = Owner{NodeID: string(k.Value), Epoch: k.CreateRevision}
		}
	}
	return st, nil
}
