// Package meshtest starts the whole mesh (libs/meshrun) for a test against
// the test PostgreSQL and RabbitMQ (libs/testkit/pgtest, libs/testkit/amqptest) and an
// embedded etcd (libs/testkit/etcdtest), and tears it down at cleanup.
package meshtest

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cronmesh/cronmesh/libs/meshrun"
	"github.com/cronmesh/cronmesh/libs/postgres"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/etcdtest"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
)

// BinDirEnv names a directory that already holds the binaries (`make
// build` writes them into bin/, and `make test` sets this to it), so that
// no end-to-end suite builds the services again; the caller vouches that
// they are up to date. Unset, every test binary builds its own.
const BinDirEnv = "CRONMESH_TEST_BIN_DIR"

// Binaries builds the mesh's binaries once per test binary (building five
// services takes seconds even from a warm cache; every test of a package
// shares them), or takes them from $CRONMESH_TEST_BIN_DIR. TestMain calls
// Remove after m.Run.
type Binaries struct {
	once     sync.Once
	dir      string
	built    bool // dir is ours to remove
	err      error
	extraMu  sync.Mutex
	extraErr map[string]error
}

// Dir builds the binaries on first use and returns their directory; it
// fails the test when the build fails or a prebuilt directory lacks one.
func (b *Binaries) Dir(t testing.TB) string {
	t.Helper()
	b.once.Do(func() {
		closeInheritedOnExec()
		if dir := os.Getenv(BinDirEnv); dir != "" {
			b.dir = dir
			for _, svc := range meshrun.Services() {
				if _, err := os.Stat(filepath.Join(dir, svc)); err != nil {
					b.err = fmt.Errorf("%s=%s: %w (run `make build`)", BinDirEnv, dir, err)
					return
				}
			}
			return
		}
		b.dir, b.err = os.MkdirTemp("", "cronmesh-mesh-bin-")
		if b.err == nil {
			b.built = true
			b.err = meshrun.Build(context.Background(), b.dir)
		}
	})
	if b.err != nil {
		t.Fatalf("meshtest: %v", b.err)
	}
	return b.dir
}

// Binary returns the path of another binary of the repository beside the
// mesh's (the console, cronctl), named for its command directory under
// services/ (pkg, e.g. "console/cmd/console"): prebuilt in
// $CRONMESH_TEST_BIN_DIR, or built once into the package's directory.
func (b *Binaries) Binary(t testing.TB, name, pkg string) string {
	t.Helper()
	dir := b.Dir(t)
	path := filepath.Join(dir, name)
	b.extraMu.Lock()
	defer b.extraMu.Unlock()
	if b.extraErr == nil {
		b.extraErr = map[string]error{}
	}
	err, done := b.extraErr[name]
	if !done {
		if b.built {
			out, berr := exec.Command("go", "build", "-o", path, "github.com/cronmesh/cronmesh/services/"+pkg).CombinedOutput()
			if berr != nil {
				err = fmt.Errorf("building %s: %w\n%s", name, berr, out)
			}
		} else if _, serr := os.Stat(path); serr != nil {
			err = fmt.Errorf("%s: %w (run `make build`)", BinDirEnv, serr)
		}
		b.extraErr[name] = err
	}
	if err != nil {
		t.Fatalf("meshtest: %v", err)
	}
	return path
}

// closeInheritedOnExec marks every file descriptor the test process
// inherited beyond stdin, stdout and stderr close-on-exec. Go opens its own
// files close-on-exec but passes inherited ones on to every child, so
// without this a lock file held by `flock` around `go test` reaches the
// services and, worse, the PostgreSQL or RabbitMQ server a fault-injection
// test restarts — which then holds the lock for as long as it runs.
func closeInheritedOnExec() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return // not Linux: nothing to do that this package knows of
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// Remove deletes the binaries it built (never a prebuilt directory); call
// it from TestMain after m.Run.
func (b *Binaries) Remove() {
	if b.built {
		_ = os.RemoveAll(b.dir)
	}
}

// Main is the TestMain of a package that shares b among its tests: it runs
// them, removes the binaries and exits with the tests' status.
func (b *Binaries) Main(m *testing.M) {
	code := m.Run()
	b.Remove()
	os.Exit(code)
}

// Options are meshrun.Options without what meshtest fills in (binaries,
// servers, name, log directory).
type Options struct {
	APIKeys       map[string]string
	TriggerNodes  int
	Partitions    int
	LeaseTTL      time.Duration
	RetryTiers    []time.Duration
	OTLPEndpoint  string
	AllowNetworks []string
	LogLevel      string
	ExtraArgs     map[string][]string
	Env           []string
	// Etcd is the trigger ring's etcd; nil starts one for the test. A test
	// that stops and restarts etcd passes its own.
	Etcd *etcdtest.Cluster
	// PostgresURL and AMQPURL default to the test servers (pgtest.URL,
	// amqptest.URL); a test cutting a service off passes a proxy's URL
	// (pgtest.NewProxy, amqptest.NewProxy). The cleanup drops the mesh's
	// schemas and broker objects through them too: a test that cuts a
	// proxy registers its Up with t.Cleanup after Start, so that it runs
	// first.
	PostgresURL, AMQPURL string
	// EtcdEndpoints, when set, replace Etcd's own (a proxy in front of it).
	EtcdEndpoints []string
	// Only: see meshrun.Options.Only.
	Only []string
}

// Start runs a mesh for t from the binaries in bins: its own schemas,
// broker names and embedded etcd. At cleanup it stops every process
// gracefully (a process that needs SIGKILL fails the test: graceful
// shutdown is part of what is tested), logs the tail of every service's log
// when t failed, and drops the schemas and broker objects.
func Start(t testing.TB, bins *Binaries, opts Options) *meshrun.Mesh {
	t.Helper()
	etcd := opts.Etcd
	if etcd == nil {
		etcd = etcdtest.New(t)
	}
	etcdEndpoints := opts.EtcdEndpoints
	if len(etcdEndpoints) == 0 {
		etcdEndpoints = etcd.Endpoints()
	}
	logDir := t.TempDir()
	mesh, err := meshrun.Start(context.Background(), meshrun.Options{
		BinDir: bins.Dir(t), PostgresURL: cmp.Or(opts.PostgresURL, pgtest.URL()), AMQPURL: cmp.Or(opts.AMQPURL, amqptest.URL()),
		EtcdEndpoints: etcdEndpoints, Name: "m_" + randomHex(t), APIKeys: opts.APIKeys,
		TriggerNodes: opts.TriggerNodes, Partitions: opts.Partitions, LeaseTTL: opts.LeaseTTL, RetryTiers: opts.RetryTiers,
		OTLPEndpoint: opts.OTLPEndpoint, AllowNetworks: opts.AllowNetworks, LogDir: logDir, LogLevel: opts.LogLevel,
		ExtraArgs: opts.ExtraArgs, Env: opts.Env, Only: opts.Only,
	})
	if err != nil {
		dumpLogs(t, logDir)
		t.Fatalf("meshtest: %v", err)
	}
	t.Cleanup(func() {
		if err := mesh.Close(); err != nil {
			t.Errorf("meshtest: %v", err)
		}
		if t.Failed() {
			dumpLogs(t, logDir)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := mesh.Cleanup(ctx); err != nil {
			t.Errorf("meshtest: %v", err)
		}
	})
	return mesh
}

// logTail is how many lines of each service's log a failed test shows.
const logTail = 60

func dumpLogs(t testing.TB, dir string) {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		var lines []string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if len(lines) > logTail {
				lines = lines[1:]
			}
		}
		f.Close()
		name := filepath.Base(path)
		for _, l := range lines {
			t.Logf("[%s] %s", name, l)
		}
	}
}

func randomHex(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("meshtest: %v", err)
	}
	return hex.EncodeToString(b[:])
}

// Pool connects to service's schema of mesh on the test PostgreSQL (as the
// service itself connects, never through a test's proxy), for a test that
// reads the service's tables; the pool is closed at cleanup.
func Pool(t testing.TB, mesh *meshrun.Mesh, service string) *pgxpool.Pool {
	t.Helper()
	schema, ok := mesh.Schemas[service]
	if !ok {
		t.Fatalf("meshtest: no service %q", service)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := postgres.Connect(ctx, postgres.Options{URL: pgtest.URL(), Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatalf("meshtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}
