// Package store keeps job definitions in PostgreSQL (schema `registry`) and
// writes, in the same transaction as every change, the JobEvent that tells
// the rest of the mesh about it (a transactional outbox: an event exists if
// and only if its change committed).
package store
