// Package schedule is cronmesh's single answer to "when does a job fire".
//
// The registry (schedule previews, next runs of a job), the trigger (firing)
// and alerting (the missed-run watchdog) all call this package, so that they
// can never disagree about a job's times.
//
// A Schedule is one of four kinds:
//
//   - cron: a Vixie-cron expression (5 fields, or 6 with a leading seconds
//     field), with Quartz's L, W and # in the day fields, evaluated on the
//     wall clock of an IANA time zone. See ParseCron for the syntax and
//     Schedule.Next for the daylight-saving rules;
//   - interval: every fixed duration of elapsed time from an anchor, blind to
//     time zones and daylight saving;
//   - at: once, at an instant;
//   - after: once, a delay after the job was created.
//
// Any kind may be bounded by a start and an end instant (Schedule.WithBounds).
//
// Everything is computed arithmetically (the cron search jumps field by
// field over the calendar and never steps second by second), because the
// trigger evaluates Next for millions of jobs. Cron, Schedule and all
// functions are safe for concurrent use.
package schedule
