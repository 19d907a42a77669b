// Package jobspec turns a job's protobuf schedule into a schedule.Schedule.
//
// It is the single place where the wire form of a schedule gets its meaning,
// so that the registry (PreviewSchedule, next run times), the trigger (firing)
// and alerting (the missed-schedule watchdog) can never disagree about when a
// job is due.
package jobspec
