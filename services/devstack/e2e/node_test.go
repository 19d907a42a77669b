package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/testkit/meshtest"
)

const nodeKey = "node-key-0123456789abcdef"

// nodeTimeout bounds each npm or node command: the build of the package,
// and the Node test, whose own waits are bounded well below it.
const nodeTimeout = 5 * time.Minute

// webhookRecorder is a webhook target that answers 204 and remembers the
// webhook-id of every request and whether it was signed.
type webhookRecorder struct {
	mu     sync.Mutex
	ids    []string
	signed map[string]bool
}

func (r *webhookRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	id := req.Header.Get("webhook-id")
	r.mu.Lock()
	r.ids = append(r.ids, id)
	r.signed[id] = req.Header.Get("webhook-signature") != "" && req.Header.Get("webhook-timestamp") != ""
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *webhookRecorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids)
}

// TestNodeClient runs the TypeScript package's Node test (gen/ts/test) against
// the whole mesh: it builds the package as a user would (npm run build),
// then node --test creates a job over the Connect protocol, waits for a
// succeeded execution in the history, reads both over gRPC and runs the
// README's Node example. The webhook target here must have received the
// execution the Node test found.
//
// node_modules come from `make tools` (npm ci on the lock file); without
// them the test fails and says so rather than skipping.
func TestNodeClient(t *testing.T) {
	t.Parallel()
	pkg, err := filepath.Abs(filepath.Join("..", "..", "..", "gen", "ts"))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(pkg, "node_modules", ".bin", "tsc"))
	require.NoError(t, err, "gen/ts has no node_modules: run `make tools`")
	for _, tool := range []string{"node", "npm"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "%s is not on PATH; the TypeScript client's test needs Node 20 or later", tool)
	}

	// Build before the mesh starts, so the mesh does not sit idle meanwhile.
	runNode(t, pkg, nil, "npm", "run", "--silent", "build")
	runNode(t, pkg, nil, "npm", "run", "--silent", "build:test")

	target := &webhookRecorder{signed: map[string]bool{}}
	srv := httptest.NewServer(target)
	t.Cleanup(srv.Close)
	mesh := meshtest.Start(t, bins, meshtest.Options{APIKeys: map[string]string{"node": nodeKey}})

	resultPath := filepath.Join(t.TempDir(), "result.json")
	runNode(t, pkg, []string{
		"CRONMESH_REGISTRY_URL=" + mesh.Registry.URL,
		"CRONMESH_HISTORY_URL=" + mesh.History.URL,
		"CRONMESH_API_KEY=" + nodeKey,
		"CRONMESH_TARGET_URL=" + srv.URL,
		"CRONMESH_TEST_RESULT=" + resultPath,
	}, "node", "--test", "--test-reporter=spec", "dist-test/test/mesh.test.js")

	raw, err := os.ReadFile(resultPath)
	require.NoError(t, err, "the Node test passed but wrote no result")
	var result struct{ JobID, ExecutionID string }
	require.NoError(t, json.Unmarshal(raw, &result), "the Node test's result: %s", raw)
	require.NotEmpty(t, result.ExecutionID, "the Node test's result: %s", raw)
	require.Contains(t, target.seen(), result.ExecutionID,
		"the target never received the webhook of execution %s (job %s) that the history shows succeeded", result.ExecutionID, result.JobID)
	target.mu.Lock()
	defer target.mu.Unlock()
	require.True(t, target.signed[result.ExecutionID], "the webhook of execution %s came unsigned", result.ExecutionID)
}

// runNode runs an npm or node command in the package directory with the
// extra environment and fails the test with its whole output when it fails.
func runNode(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), nodeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v in %s: %v\n%s", name, args, dir, err, out)
	}
	t.Logf("%s %v:\n%s", name, args, out)
}
