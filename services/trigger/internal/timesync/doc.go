// Package timesync keeps a trigger node's clock on PostgreSQL's.
//
// A node fires a slot when its clock reaches the slot's time, so a node on
// a host whose clock runs ahead would fire early, and one running behind,
// late, while nothing else in the mesh notices: the ledger and the fencing
// stop a slot from firing twice, not from firing at the wrong time. Every
// firing commits to PostgreSQL anyway, so its clock is the one reference
// all nodes already share: the Syncer measures this node's offset from it
// (the round trip of `SELECT clock_timestamp()`, halved) and, when it is
// beyond a tolerance, corrects the node's clock by it. The fault-injection
// suite's skewed node (--clock-offset) fired 10 s early before this.
package timesync
