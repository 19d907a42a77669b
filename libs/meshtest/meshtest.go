// Package meshtest starts the whole mesh (libs/meshrun) for a test against
// the test PostgreSQL and RabbitMQ (libs/pgtest, libs/amqptest) and an
// embedded etcd (libs/etcdtest), and tears it down at cleanup.
package meshtest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
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
}

// Start runs a mesh for t from the binaries in bins: its own schemas,
// broker names and embedded etcd. At cleanup it stops every process
// gracefully (a process that needs SIGKILL fails the test: graceful
// shutdown is part of what is tested), logs the tail of every service's log
// when t failed, and drops the schemas and broker objects.
func Start(t testing.TB, bins *Binaries, opts Options) *meshrun.Mesh {
	t.Helper()
	etcd := etcdtest.New(t)
	logDir := t.TempDir()
	mesh, err := meshrun.Start(context.Background(), meshrun.Options{
		BinDir: bins.Dir(t), PostgresURL: pgtest.URL(), AMQPURL: amqptest.URL(), EtcdEndpoints: etcd.Endpoints(),
		Name: "m_" + randomHex(t), APIKeys: opts.APIKeys,
		TriggerNodes: opts.TriggerNodes, Partitions: opts.Partitions, LeaseTTL: opts.LeaseTTL, RetryTiers: opts.RetryTiers,
		OTLPEndpoint: opts.OTLPEndpoint, AllowNetworks: opts.AllowNetworks, LogDir: logDir, LogLevel: opts.LogLevel,
		ExtraArgs: opts.ExtraArgs, Env: opts.Env,
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
