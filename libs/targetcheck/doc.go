// Package targetcheck is the one validator of job targets (HTTP and AMQP):
// the registry checks a job's target with it on create and update, the
// dispatcher a redrive's target_override, so an override can never get
// past a rule a job could not. It also owns the rules of secret headers
// (write-only: kept on update, redacted on every read).
package targetcheck
