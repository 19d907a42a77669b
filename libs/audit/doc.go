// Package audit records who changed what: every call of a service's API
// that may change state (every RPC not marked idempotency_level =
// NO_SIDE_EFFECTS) leaves a record of its time, namespace, key id,
// procedure, the ids of the objects it named or created, and its outcome
// code, refused calls included. Each service keeps its records in its own
// database (services do not read each other's tables) and serves them with
// cronmesh.audit.v1.AuditService, to its namespace's admins.
//
// A record is written when the call ends, in its own statement rather than
// in the call's transaction, so failed and refused calls are recorded too.
// The price: a process that dies between a change's commit and its record
// loses that record, and a record that cannot be written (the database
// down) is logged at error level, with every field, instead.
//
// Records older than the retention (Options.Retention, 90 days by default)
// are deleted by the first record written an hour or more after the last
// deletion, so the log needs no lifecycle of its own.
package audit
