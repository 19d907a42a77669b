// Package e2e runs cronctl's commands against a real registry, trigger,
// dispatcher, history and alerting, started as processes on loopback by
// libs/testkit/meshtest. It lives apart from the unit tests so that `make test`
// runs it in its end-to-end phase rather than beside the race-detector
// suites competing for the same cores.
package e2e
