// Package quota holds what every per-namespace quota of cronmesh shares: a
// limit with a default and per-namespace overrides taken from flags, the
// check that refuses a request going beyond it, the error a client gets back
// (RESOURCE_EXHAUSTED with a google.rpc.QuotaFailure detail naming the
// quota), and the Prometheus counter of refusals by namespace and quota.
//
// The quotas themselves live where their resource is counted: the registry
// caps jobs per namespace, the trigger concurrent backfills, and
// libs/ratelimit each API key's requests per second.
package quota
