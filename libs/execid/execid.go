// Package execid derives execution ids. An execution is one (job, nominal
// time) slot; deriving its id from the slot (instead of drawing a random one
// when it fires) means every component that ever sees the slot (a trigger
// firing it twice after a failover, a redelivered message, the alerting
// watchdog expecting it) computes the same id, and a target receives the same
// idempotency key on every attempt.
package execid

import (
	"time"

	"github.com/google/uuid"
)

// For returns the execution id of the slot of jobID at nominal: a UUIDv5
// (SHA-1) in the namespace of the job's UUID, of the nominal time in RFC 3339
// with nanoseconds, UTC. A job id that is not a UUID is hashed into the nil
// namespace instead, so the function is total.
func For(jobID string, nominal time.Time) string {
	ns, err := uuid.Parse(jobID)
	name := nominal.UTC().Format(time.RFC3339Nano)
	if err != nil {
		ns, name = uuid.Nil, jobID+"/"+name
	}
	return uuid.NewSHA1(ns, []byte(name)).String()
}
