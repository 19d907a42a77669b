// Package slotinfo tells a target which slot a delivery is for: the
// cronmesh-* headers every HTTP request and AMQP message carries (nominal
// time, fire time, attempt, job id, execution id, trigger kind), and the
// body template language that puts the same values into a job's body.
//
// The template language is deliberately not text/template: a body is
// written by any editor of a namespace and rendered inside the dispatcher on
// every attempt, so it has no functions, no conditionals and no loops, only
// placeholders from a fixed list, and the largest rendering of a template
// is known when the job is created (see docs/adr/0012-slot-at-the-target.md).
package slotinfo
