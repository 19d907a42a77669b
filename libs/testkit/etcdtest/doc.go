// Package etcdtest runs a real, single-member etcd server inside the test
// process (go.etcd.io/etcd/server/v3/embed), so packages that coordinate
// through etcd are tested against the real thing: leases that really expire,
// watches that really fire, transactions with real revisions.
//
// New gives each test its own server on free 127.0.0.1 ports with its data in
// t.TempDir(), stopped at cleanup; Cluster.Stop and Cluster.Restart let chaos
// tests take etcd away and bring it back on the same address with the same
// data. Start is the non-test core that New uses, for a development command
// that wants an embedded etcd without a separate binary.
//
// Both configure a heartbeat of 100 ms and an election timeout of 600 ms
// instead of etcd's 100 ms / 1 s. For a single member the election timeout
// changes nothing but the server's minimum lease TTL, which etcd derives as
// ceil(1.5 × election timeout): 2 s with the defaults, so a 1 s lease would
// silently be granted as 2 s. With 600 ms the minimum is 1 s, and tests of
// lease expiry can use 1 s leases.
package etcdtest
