// Package chaos_test is the fault-injection suite: each test starts the
// whole mesh (libs/testkit/meshtest), fires N every-second jobs at a recording HTTP
// target, injects one fault mid-run (a SIGKILL, a SIGSTOP past the lease, a
// restart of RabbitMQ, PostgreSQL or etcd, a hanging target, a skewed clock,
// a rolling restart of every service), keeps the load on after recovery for
// a bounded window, and then lets the independent ledger
// (libs/testkit/ledger) judge every slot of the window.
//
// `make test` runs a short version (CRONMESH_CHAOS_JOBS=200, short
// outages); `make chaos` runs it longer and larger and prints the summary
// table of every scenario's recovery time. Every scenario runs on its own
// mesh, etcd and target, and the two that restart PostgreSQL and RabbitMQ
// restart servers of their own (pgtest.NewServer, amqptest.NewServer), so
// all are parallel tests: `make test` runs them beside the other
// end-to-end suites, two at a time (go test's -parallel, the number of
// cores), and `make chaos`, at its larger sizes, one at a time
// (-parallel 1).
package chaos_test

import (
	"testing"

	"github.com/cronmesh/cronmesh/libs/testkit/meshtest"
)

// bins are the mesh's binaries, built once for every test of the package.
var bins = &meshtest.Binaries{}

func TestMain(m *testing.M) { bins.Main(m) }
