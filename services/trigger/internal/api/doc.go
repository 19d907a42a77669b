// Package api serves cronmesh.trigger.v1.TriggerService: the ring's state,
// a job's firing ledger and backfills. errors.go is the one place domain
// errors become Connect codes.
package api
