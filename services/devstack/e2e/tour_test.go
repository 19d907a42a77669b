package e2e_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
)

// The tour test runs what a newcomer runs: `deploy/local/dev.sh` (the
// recipe of `make dev`) with the binaries of `make build` and the tools of
// `make tools`, then the README's tour, block by block, exactly as written.
// It needs the default ports of the local stack, so it cannot run beside a
// `make dev`; it fails (never skips) when they are taken.

const (
	// tourKey is the development key the README documents.
	tourKey = "cm_dev_0000000000000000"
	// tourBanner is the line dev.sh prints once everything is up.
	tourBanner = "cronmesh (development) is up"
	// tourStartTimeout bounds dev.sh's start: etcd, seven processes and
	// their readiness, on a busy two-core machine.
	tourStartTimeout = 3 * time.Minute
	// tourDemoTimeout bounds the wait for the demo job's first success in
	// the history (it fires every 5 s).
	tourDemoTimeout = time.Minute
	// tourRunTimeout bounds the README's blocks together (each await in
	// them gives up after a minute).
	tourRunTimeout = 4 * time.Minute
	// tourStopTimeout bounds dev.sh's shutdown (it gives each process 20 s
	// before killing it).
	tourStopTimeout = 90 * time.Second
)

// tourPorts are the ports dev.sh serves on, by name, as the README lists
// them.
var tourPorts = map[int]string{
	2379: "etcd", 8081: "registry", 8082: "trigger-1", 8182: "trigger-2", 8282: "trigger-3",
	8083: "dispatcher", 8084: "history", 8085: "alerting", 8080: "console", 8090: "devecho",
}

func TestTour(t *testing.T) {
	t.Parallel()
	root := tourRepoRoot(t)
	for _, bin := range []string{"devetcd", "devecho", "registry", "trigger", "dispatcher", "history", "alerting", "console", "grpcurl", "buf"} {
		if _, err := os.Stat(filepath.Join(root, "bin", bin)); err != nil {
			t.Fatalf("bin/%s is missing: run `make build` and `make tools` first (`make test` does): %v", bin, err)
		}
	}
	if taken := tourTakenPorts(); len(taken) > 0 {
		t.Fatalf("the tour needs the default ports of `make dev`, and these are taken: %s (is a `make dev` running?)", strings.Join(taken, ", "))
	}
	if _, err := exec.LookPath("jaeger"); err == nil {
		// dev.sh would start it and need 4317 and 16686 too.
		for _, p := range []int{4317, 16686} {
			require.Falsef(t, tourPortOpen(p), "jaeger is on PATH and port %d is taken", p)
		}
	}

	// The working directory of the tour: the README runs from the
	// repository root, with bin/ and .dev/; here bin/ is the repository's
	// and .dev/ is this test's own.
	work := t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(root, "bin"), filepath.Join(work, "bin")))
	devDir := filepath.Join(work, ".dev")

	db := tourDatabase(t)
	dev := tourStartDev(t, root, devDir, db)
	demoID := dev.await(t, tourDemoRE)
	t.Logf("dev.sh is up; demo job %s", demoID)

	t.Run("demo job succeeds", func(t *testing.T) {
		tourAwaitSucceeded(t, demoID)
	})

	t.Run("console serves against the demo job", func(t *testing.T) {
		tourConsole(t, demoID)
	})

	t.Run("README tour", func(t *testing.T) {
		blocks := tourBlocks(t, filepath.Join(root, "README.md"))
		out := tourRun(t, work, blocks)

		// Block 1: services, health, PreviewSchedule with buf curl.
		require.Contains(t, out[0], "cronmesh.registry.v1.JobService")
		require.Equal(t, 7, strings.Count(out[0], `"status": "SERVING"`), "every service reports SERVING:\n%s", out[0])
		// Weekdays at 09:00 in Berlin after the switch to summer time
		// (29 March 2026) are 07:00 UTC.
		require.Contains(t, out[0], "2026-03-30T07:00:00Z")

		// Block 2: the job is created and fires; history lists it.
		m := regexp.MustCompile(`"id": "([0-9a-f-]{36})"`).FindStringSubmatch(out[1])
		require.NotNil(t, m, "CreateJob returned no job id:\n%s", out[1])
		tickID := m[1]
		require.Contains(t, out[1], `"jobId": "`+tickID+`"`, "the history lists the job's executions")
		require.Contains(t, out[1], "EXECUTION_STATUS_SUCCEEDED")
		require.Regexp(t, `"executionId": "[^"]+"`, out[1])
		require.Regexp(t, `path=/tick status=200 webhook_id=\S+ idempotency_key=\S+`, out[1], "devecho logged the delivery with its headers")
		require.Regexp(t, `nominal_time=\d{4}-\d\d-\d\dT[0-9:]+Z attempt=1 trigger_kind=scheduled`, out[1], "devecho logged the slot headers")
		require.Regexp(t, `body="\{\\"kind\\":\\"tick\\",\\"slot\\":\\"\d{4}-\d\d-\d\dT[0-9:]+Z\\"\}"`, out[1], "the body template was rendered")
		// The SKIP job: a slot skipped while the slow one ran.
		require.Contains(t, out[1], "EXECUTION_STATUS_SKIPPED")
		require.Regexp(t, `"reason": "skipped: execution [0-9a-f-]{36} of this job is still in progress"`, out[1])

		// Block 3: dead letter, incident, notification, redrive, resolution.
		require.Contains(t, out[2], `"deadLetters"`)
		require.Contains(t, out[2], "HTTP 500")
		require.Contains(t, out[2], "INCIDENT_STATE_OPEN")
		require.Contains(t, out[2], "INCIDENT_KIND_DEAD_LETTERED")
		require.Contains(t, out[2], "path=/alerts status=200", "the webhook channel notified devecho")
		require.Regexp(t, `"executionId": "[^"]+"`, out[2], "RedriveDeadLetter answers the execution id")
		require.Contains(t, out[2], "INCIDENT_STATE_RESOLVED")
	})

	dev.stop(t)

	// A second `make dev` on the same database and .dev finds the demo job
	// the first one created instead of adding another.
	again := tourStartDev(t, root, devDir, db)
	require.Equal(t, demoID, again.await(t, tourDemoRE), "the restarted dev.sh reports the same demo job")
	tourOneDemoJob(t)
	again.stop(t)
}

// tourDemoRE finds the demo job's id in dev.sh's banner.
var tourDemoRE = regexp.MustCompile(`Demo job "demo: every 5 seconds" \(([0-9a-f-]{36})\)`)

// tourOneDemoJob checks that the registry holds exactly one demo job.
func tourOneDemoJob(t *testing.T) {
	t.Helper()
	client := registryv1connect.NewJobServiceClient(http.DefaultClient, "http://127.0.0.1:8081")
	req := connect.NewRequest(&registryv1.ListJobsRequest{Labels: map[string]string{"demo": "dev"}})
	req.Header().Set("Authorization", "Bearer "+tourKey)
	resp, err := client.ListJobs(context.Background(), req)
	require.NoError(t, err)
	require.Len(t, resp.Msg.GetJobs(), 1, "demo jobs after a restart")
}

// tourConsole checks the console dev.sh started, as a browser reaches it:
// the page (built into bin/console by `make build`), and the services'
// APIs on its origin with the development key: who the key is, the demo
// job found by name, its executions.
func tourConsole(t *testing.T, demoID string) {
	t.Helper()
	const console = "http://127.0.0.1:8080"
	res, err := http.Get(console + "/jobs/" + demoID)
	require.NoError(t, err)
	page, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, "the console's page: %s", page)
	require.Contains(t, res.Header.Get("Content-Type"), "text/html")
	require.Regexp(t, `<script type="module"[^>]* src="/assets/[^"]+\.js"`, string(page), "the built application")

	auth := connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+tourKey)
			return next(ctx, req)
		}
	}))
	ctx := context.Background()
	who, err := registryv1connect.NewKeyServiceClient(http.DefaultClient, console, auth).
		GetCallerIdentity(ctx, connect.NewRequest(&registryv1.GetCallerIdentityRequest{}))
	require.NoError(t, err)
	require.Equal(t, "dev", who.Msg.GetNamespace())
	require.Equal(t, registryv1.KeyRole_KEY_ROLE_ADMIN, who.Msg.GetRole())

	jobs, err := registryv1connect.NewJobServiceClient(http.DefaultClient, console, auth).
		ListJobs(ctx, connect.NewRequest(&registryv1.ListJobsRequest{NameContains: "DEMO: every"}))
	require.NoError(t, err)
	require.Len(t, jobs.Msg.GetJobs(), 1, "the demo job, searched by name through the console")
	require.Equal(t, demoID, jobs.Msg.GetJobs()[0].GetId())

	execs, err := historyv1connect.NewHistoryServiceClient(http.DefaultClient, console, auth).
		ListExecutions(ctx, connect.NewRequest(&historyv1.ListExecutionsRequest{JobId: demoID, PageSize: 5}))
	require.NoError(t, err)
	require.NotEmpty(t, execs.Msg.GetExecutions(), "the demo job's executions, through the console")
}

// tourRepoRoot is the repository root, three directories above the
// package's, where go test runs the test.
func tourRepoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "deploy", "local", "dev.sh"))
	require.NoError(t, err, "deploy/local/dev.sh not found under %s", root)
	return root
}

func tourPortOpen(port int) bool {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// tourTakenPorts lists the dev.sh ports something listens on.
func tourTakenPorts() []string {
	var taken []string
	for port, name := range tourPorts {
		if tourPortOpen(port) {
			taken = append(taken, fmt.Sprintf("%d (%s)", port, name))
		}
	}
	return taken
}

// tourDatabase creates a throwaway database next to the test database and
// returns its URL; it is dropped (connections and all) at cleanup.
func tourDatabase(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := pgtest.URL()
	cfg, err := pgx.ParseConfig(admin)
	require.NoError(t, err)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("PostgreSQL is unreachable (%v); run `make test`, which starts it, or set %s", err, pgtest.URLEnv)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "cronmesh_tour_" + hex.EncodeToString(b[:])
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	// The same server and credentials, the new database.
	u := strings.Replace(admin, "/"+cfg.Database, "/"+name, 1)
	require.NotEqual(t, admin, u, "cannot put database %s into %s", name, admin)
	return u
}

// tourDev is a running dev.sh.
type tourDev struct {
	cmd    *exec.Cmd
	devDir string
	done   chan struct{} // closed when dev.sh has exited and its output is read
	err    error         // its Wait result, once done

	mu     sync.Mutex
	output strings.Builder // everything it printed
	lines  chan string     // its lines, until it exits
}

// tourStartDev starts dev.sh with its state in devDir and the database at
// dbURL. At cleanup it makes sure dev.sh and everything it started are gone,
// and on failure prints dev.sh's output and its logs' last lines.
func tourStartDev(t *testing.T, root, devDir, dbURL string) *tourDev {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "deploy", "local", "dev.sh"))
	cmd.Env = append(os.Environ(), "CRONMESH_POSTGRES_URL="+dbURL, "CRONMESH_DEV_DIR="+devDir)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	require.NoError(t, cmd.Start())
	d := &tourDev{cmd: cmd, devDir: devDir, done: make(chan struct{}), lines: make(chan string, 1024)}
	read := make(chan struct{})
	go func() {
		d.err = cmd.Wait()
		_ = pw.Close()
		// Its last lines may still be in the pipe: done means they are in
		// the output too.
		<-read
		close(d.done)
	}()
	go func() {
		defer close(read)
		defer close(d.lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			d.mu.Lock()
			d.output.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
			select {
			case d.lines <- sc.Text():
			default: // nobody is waiting for lines any more
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			// The test failed before stopping it: stop it as Ctrl-C would.
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-d.done:
			case <-time.After(tourStopTimeout):
				_ = cmd.Process.Kill()
				<-d.done
			}
		}
		// Whatever dev.sh could not stop (it was killed) goes now.
		for name, pid := range d.pids(t) {
			if syscall.Kill(pid, 0) == nil {
				t.Errorf("%s (pid %d) still runs after dev.sh exited; killing it", name, pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if t.Failed() {
			t.Logf("dev.sh output:\n%s", d.outputText())
			logs, _ := filepath.Glob(filepath.Join(devDir, "logs", "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
				t.Logf("--- %s (last 30 lines)\n%s", l, strings.Join(lines[max(0, len(lines)-30):], "\n"))
			}
		}
	})
	return d
}

func (d *tourDev) outputText() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.output.String()
}

// await waits for the banner, then returns the first submatch of re in the
// output so far. It fails when dev.sh exits or is not up in time.
func (d *tourDev) await(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.After(tourStartTimeout)
	for up := false; !up; {
		select {
		case line, ok := <-d.lines:
			if !ok {
				<-d.done
				t.Fatalf("dev.sh exited before it was up (%v)", d.err)
			}
			up = strings.Contains(line, tourBanner)
		case <-deadline:
			t.Fatalf("dev.sh was not up after %s", tourStartTimeout)
		}
	}
	// The banner is printed in one go; give its last lines a moment.
	var m []string
	for range 50 {
		if m = re.FindStringSubmatch(d.outputText()); m != nil {
			return m[1]
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s not in dev.sh's banner", re)
	return ""
}

// pids reads the "name pid" lines dev.sh keeps in its pids file.
func (d *tourDev) pids(t *testing.T) map[string]int {
	b, err := os.ReadFile(filepath.Join(d.devDir, "pids"))
	if err != nil {
		t.Errorf("dev.sh's pids file: %v", err)
		return nil
	}
	pids := map[string]int{}
	for line := range strings.Lines(string(b)) {
		name, pid, ok := strings.Cut(strings.TrimSpace(line), " ")
		n, err := strconv.Atoi(pid)
		if ok && err == nil {
			pids[name] = n
		}
	}
	return pids
}

// stop sends SIGINT (what Ctrl-C sends) to dev.sh and checks that it exits
// cleanly, that every process it started is gone and that its ports are
// free.
func (d *tourDev) stop(t *testing.T) {
	t.Helper()
	pids := d.pids(t)
	// One process per port (etcd, devecho, the services), and Jaeger.
	require.Len(t, pids, len(tourPorts)+tourJaeger(), "dev.sh's pids file: %v", pids)
	require.NoError(t, d.cmd.Process.Signal(os.Interrupt))
	select {
	case <-d.done:
	case <-time.After(tourStopTimeout):
		t.Fatalf("dev.sh did not exit within %s of SIGINT", tourStopTimeout)
	}
	require.NoError(t, d.err, "dev.sh's exit status after SIGINT")
	require.Contains(t, d.outputText(), "dev: stopped")
	for name, pid := range pids {
		require.Equalf(t, syscall.ESRCH, syscall.Kill(pid, 0), "%s (pid %d) still runs", name, pid)
	}
	require.Empty(t, tourTakenPorts(), "ports still open after dev.sh stopped")
}

// tourJaeger is 1 when dev.sh starts a jaeger of its own (one on PATH and
// no CRONMESH_OTLP_ENDPOINT).
func tourJaeger() int {
	if os.Getenv("CRONMESH_OTLP_ENDPOINT") != "" {
		return 0
	}
	if _, err := exec.LookPath("jaeger"); err == nil {
		return 1
	}
	return 0
}

// tourAwaitSucceeded waits until the history holds a succeeded execution of
// the job, asked with the generated Go client as any program would.
func tourAwaitSucceeded(t *testing.T, jobID string) {
	t.Helper()
	client := historyv1connect.NewHistoryServiceClient(http.DefaultClient, "http://127.0.0.1:8084")
	deadline := time.Now().Add(tourDemoTimeout)
	var last error
	for time.Now().Before(deadline) {
		req := connect.NewRequest(&historyv1.ListExecutionsRequest{
			JobId:    jobID,
			Statuses: []historyv1.ExecutionStatus{historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED},
			PageSize: 1,
		})
		req.Header().Set("Authorization", "Bearer "+tourKey)
		resp, err := client.ListExecutions(context.Background(), req)
		if err == nil && len(resp.Msg.GetExecutions()) > 0 {
			e := resp.Msg.GetExecutions()[0]
			require.Equal(t, jobID, e.GetJobId())
			require.Equal(t, int32(http.StatusOK), e.GetResponseStatus())
			return
		}
		last = err
		time.Sleep(time.Second)
	}
	t.Fatalf("no succeeded execution of the demo job %s in the history after %s (last error: %v)", jobID, tourDemoTimeout, last)
}

// tourBlockRE matches a tour block of the README: a ```sh fence right after
// a <!-- tour --> comment.
var tourBlockRE = regexp.MustCompile("(?s)<!-- tour -->\\s*```sh\\n(.*?)\\n```")

// tourBlocks returns the README's tour blocks, in order.
func tourBlocks(t *testing.T, readme string) []string {
	t.Helper()
	b, err := os.ReadFile(readme)
	require.NoError(t, err)
	var blocks []string
	for _, m := range tourBlockRE.FindAllStringSubmatch(string(b), -1) {
		blocks = append(blocks, m[1])
	}
	require.Len(t, blocks, 3, "the README marks three tour blocks with <!-- tour -->; the assertions below follow them")
	return blocks
}

// tourRun runs the blocks one after the other in one bash (they share
// variables, as in one terminal) under set -euo pipefail, in dir, and
// returns each block's output. A failing block fails the test with the
// output so far.
func tourRun(t *testing.T, dir string, blocks []string) []string {
	t.Helper()
	const marker = "::tour block %d::"
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	for i, b := range blocks {
		fmt.Fprintf(&script, "echo '"+marker+"'\n%s\n", i, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), tourRunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = errors.Join(err, fmt.Errorf("the tour took longer than %s", tourRunTimeout))
	}
	require.NoError(t, err, "the README's tour failed; its output:\n%s", out)
	t.Logf("the tour's output:\n%s", out)
	parts := make([]string, len(blocks))
	rest := string(out)
	for i := len(blocks) - 1; i >= 0; i-- {
		before, after, ok := strings.Cut(rest, fmt.Sprintf(marker, i))
		require.True(t, ok, "block %d's marker missing from the output", i)
		parts[i], rest = after, before
	}
	return parts
}
