// Package e2e runs the real registry, trigger and dispatcher binaries
// together on loopback (with an embedded etcd, and the test's own schemas
// and broker names) and checks what an HTTP target receives. The Makefile
// runs it alone, after the unit tests: it fires on the wall clock.
package e2e
