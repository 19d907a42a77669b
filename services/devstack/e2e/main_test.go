// Package e2e_test runs the whole mesh — registry, trigger nodes,
// dispatcher, history and alerting as real processes (libs/testkit/meshtest) — and
// checks what a user sees end to end.
package e2e_test

import (
	"testing"

	"github.com/cronmesh/cronmesh/libs/testkit/meshtest"
)

// bins are the mesh's binaries, built once for every test of the package.
var bins = &meshtest.Binaries{}

func TestMain(m *testing.M) { bins.Main(m) }
