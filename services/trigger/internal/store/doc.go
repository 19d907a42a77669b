// Package store is the trigger's PostgreSQL state (schema `trigger` in
// production): the ring's partition count and per-partition fencing epochs,
// the schedule row of every job (a projection of the registry's job events,
// written by [Store.Apply]), and the firing ledger, one row per (job, nominal
// time) slot ever fired or recorded missed.
//
// Every slot that enters the ledger enters the outbox in the same
// transaction: a DispatchRequest on the dispatch exchange for a fired slot,
// an execution.missed event on the executions exchange for a missed one
// (routes made by broker.Route, so one relay feeds both exchanges). A slot
// is therefore published if and only if its ledger row committed, and at
// most once, since every ledger insert is ON CONFLICT DO NOTHING on the
// (job_id, nominal_time) primary key. The messages of one transaction are
// written with outbox.WriteGrouped: one outbox row per partition and
// routing key holds up to 64 of them (ADR 0019), which the relay
// publishes one by one.
//
// [Store] implements firing.Store for the engine ([Store.DueJobs],
// [Store.Commit]) and serves the TriggerService API ([Store.ListSlots],
// [Store.Backfill], [Store.Job], [Store.Partitions]).
//
// Times: PostgreSQL keeps microseconds, so every time the store writes is
// truncated to the microsecond first, and every time it reads back is equal
// (time.Time.Equal) to what was written. Cron, interval and one-shot slots
// are whole seconds anyway; manual runs carry microseconds.
package store
