// Package e2e runs cronctl's commands against a real registry, trigger,
// dispatcher, history and alerting, started as processes on loopback. It
// lives apart from the unit tests so that `make test` runs it in its
// end-to-end phase, alone, rather than beside the timing-sensitive race
// suites: it builds five binaries and starts five services and an etcd.
package e2e
