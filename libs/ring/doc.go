// Package ring decides which live trigger node fires which partition of the
// jobs, using etcd for liveness, membership and fencing.
//
// Jobs are spread over a fixed number P of partitions (Partition: FNV-1a of
// the job id mod P, fixed for the life of a cluster). Every node runs a Ring,
// which:
//
//   - keeps an etcd session: a lease of Options.LeaseTTL that the ring keeps
//     alive itself with KeepAliveOnce every TTL/3, tracking a conservative
//     local deadline on the injected monotonic clock (the clock reading taken
//     before each successful keep-alive was sent, plus the TTL, minus a safety
//     margin). The server extends the lease when it processes the request,
//     which is after we sent it, so the local deadline always passes before
//     the server could expire the lease: a node that loses contact stops
//     firing before anyone else can take over;
//   - registers itself under Prefix+"members/"+NodeID with that lease and
//     watches the members, computing the owner of every partition by
//     rendezvous hashing (Assign), so a member change moves only the
//     partitions that change owner and the others keep firing untouched;
//   - holds an owner key Prefix+"partitions/<p>" (value: the node id, with
//     the lease) for each partition assigned to it. The key's CreateRevision
//     is the partition's epoch, a fencing token the engine writes with every
//     firing so that a paused node that lost the partition cannot commit;
//   - hands partitions over safely: the old owner stops firing (Owned no
//     longer lists it) before it deletes its key, and the new owner creates
//     the key only once it is gone (If CreateRevision == 0), so a partition is
//     never owned by two nodes at once;
//   - on shutdown, stops firing, then revokes the lease so every key it held
//     vanishes at once and the other nodes take over immediately.
//
// etcd errors never crash the ring: transient errors are retried with
// backoff and jitter, a lost lease re-creates the session from scratch, and a
// broken or compacted watch re-reads the keys and carries on. Owned, Holds,
// Changes and Ready never block on etcd, and every etcd call is bounded, so
// Run and Campaign return promptly when their context ends even with etcd
// unreachable (a node told to stop must exit). Campaign runs singleton work
// (sweeps) on one node at a time, on the ring's own lease.
//
// etcd holds coordination keys only, never job data.
package ring
