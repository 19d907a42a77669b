// Package e2e runs the real registry, trigger and dispatcher binaries
// together on loopback (libs/testkit/meshtest: an embedded etcd, the test's own
// schemas and broker names) and checks what an HTTP target receives. The
// Makefile runs it in the end-to-end phase, after the unit tests: it fires
// on the wall clock.
package e2e
