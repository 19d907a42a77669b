// Package ceiling measures what this machine allows, in the same run as a
// benchmark, so that the benchmark's throughput can be given as a ratio:
// the raw rate of persistent RabbitMQ publishing with publisher confirms
// and consuming with acknowledgements through a quorum queue (as the
// dispatch queues are), with messages the size of a DispatchRequest; and
// the raw rate of batched PostgreSQL inserts into a table shaped like the
// trigger's firing ledger. Neither includes any cronmesh code: they are
// what one message or one row costs the servers themselves.
//
// The hosts these benchmarks run on have differed twofold from one day to
// the next with the same binaries, so a result that carries its own run's
// ceilings can be compared with another day's; a bare rate cannot.
package ceiling
