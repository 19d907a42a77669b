// Package ratelimit limits the requests per second of each API key: a token
// bucket per apikey.Principal.KeyID, refilled at its namespace's rate, as a
// Connect interceptor that libs/server puts on every service's handlers
// (after authentication, which runs as HTTP middleware before any
// interceptor). A request beyond the bucket is refused with
// RESOURCE_EXHAUSTED carrying a google.rpc.RetryInfo detail with the delay
// after which a request will be admitted, a google.rpc.QuotaFailure naming
// the namespace, and a Retry-After header in whole seconds.
//
// Buckets live in the memory of one process: behind a load balancer a key
// gets the rate once per replica of the service it calls. Their number is
// capped (least recently used evicted first), so however many keys call, the
// memory stays bounded.
package ratelimit
