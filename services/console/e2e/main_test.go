// Package e2e_test starts the whole mesh (libs/testkit/meshtest) and the console in
// front of it as real processes, and drives the console's pages in a real
// browser: Debian's Chromium under playwright-core, with a script in
// services/console/web/e2e.
package e2e_test

import (
	"testing"

	"github.com/cronmesh/cronmesh/libs/testkit/meshtest"
)

// bins are the mesh's binaries, built once for every test of the package.
var bins = &meshtest.Binaries{}

func TestMain(m *testing.M) { bins.Main(m) }
