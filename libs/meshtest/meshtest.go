// Package meshtest starts the whole mesh (libs/meshrun) for a test against
// the test PostgreSQL and RabbitMQ (libs/pgtest, libs/amqptest) and an
// embedded etcd (libs/etcdtest), and tears it down at cleanup.
package meshtest

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cronmesh/cronmesh/libs/amqptest"
	"github.com/cronmesh/cronmesh/libs/etcdtest"
	"github.com/cronmesh/cronmesh/libs/meshrun"
	"github.com/cronmesh/cronmesh/libs/pgtest"
)

// Binaries builds the mesh's binaries once per test binary (building five
// services takes seconds even from a warm cache; every test of a package
// shares them). TestMain calls Remove after m.Run.
type Binaries struct {
	once sync.Once
	dir  string
	err  error
}

// Dir builds the binaries on first use and returns their directory; it
// fails the test when the build fails.
func (b *Binaries) Dir(t testing.TB) string {
	t.Helper()
	b.once.Do(func() {
		closeInheritedOnExec()
		b.dir, b.err = os.MkdirTemp("", "cronmesh-mesh-bin-")
		if b.err == nil {
			b.err = meshrun.Build(context.Background(), b.dir)
		}
	})
	if b.err != nil {
		t.Fatalf("meshtest: %v", b.err)
	}
	return b.dir
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

// Remove deletes the built binaries; call it from TestMain after m.Run.
func (b *Binaries) Remove() {
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
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
