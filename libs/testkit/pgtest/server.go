package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cronmesh/cronmesh/libs/testkit/freeport"
)

// serverTimeout bounds initdb and each start or stop of a Server.
const serverTimeout = 2 * time.Minute

// Server is a PostgreSQL cluster of one test's own, in a temporary
// directory: a test that crashes and restarts its database uses one, so
// that the server every other test shares stays up and the test can run
// beside them. It runs the binaries of the machine's newest installed
// PostgreSQL (Debian's /usr/lib/postgresql/<version>/bin, else initdb on
// the PATH), as the postgres user when the test runs as root, which
// PostgreSQL refuses to run as.
type Server struct {
	t       testing.TB
	bin     string // directory of initdb and pg_ctl
	dir     string // the cluster's data directory
	port    int
	account *syscall.Credential // nil: run as the test's own user
}

// NewServer creates and starts a cluster with trust authentication,
// listening on 127.0.0.1 at a free port. t.Cleanup stops it and removes
// its directory. It fails the test when PostgreSQL's server binaries are
// not installed.
func NewServer(t testing.TB) *Server {
	t.Helper()
	bin, err := serverBinaries()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	root, err := os.MkdirTemp("", "cronmesh-pg-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	s := &Server{t: t, bin: bin, dir: filepath.Join(root, "data")}
	if os.Geteuid() == 0 {
		if s.account, err = postgresAccount(); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		// initdb, as the postgres user, makes the data directory in it.
		if err := os.Chown(root, int(s.account.Uid), int(s.account.Gid)); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	if s.port, err = freeport.Port(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	// --no-sync: the cluster is thrown away, so initdb need not wait for
	// the disk; the server itself runs with fsync on, as in production.
	s.run("initdb", "--pgdata", s.dir, "--username", "postgres", "--auth", "trust", "--encoding", "UTF8", "--locale", "C", "--no-sync")
	conf := fmt.Sprintf("\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nmax_connections = 200\n", s.port, s.dir)
	f, err := os.OpenFile(filepath.Join(s.dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(conf)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatalf("pgtest: configuring the cluster: %v", err)
	}
	t.Cleanup(func() {
		// Immediate: nothing of the cluster is kept, so nothing need be
		// flushed; a cluster that is already stopped makes pg_ctl fail,
		// which does not matter here.
		ctx, cancel := context.WithTimeout(context.Background(), serverTimeout)
		defer cancel()
		_ = s.command(ctx, "pg_ctl", "--pgdata", s.dir, "--mode", "immediate", "--wait", "stop").Run()
	})
	s.Start()
	return s
}

// URL is the cluster's database "cronmesh" (created by the first client
// that connects through pgtest or libs/postgres), as the postgres user.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/cronmesh?sslmode=disable", s.port)
}

// Start starts the stopped cluster and returns once it accepts
// connections, after its crash recovery if Stop crashed it.
func (s *Server) Start() {
	s.t.Helper()
	s.run("pg_ctl", "--pgdata", s.dir, "--log", filepath.Join(s.dir, "server.log"), "--wait", "--timeout", "120", "start")
}

// Stop stops the cluster as a crash does: its processes quit at once,
// without a checkpoint, and every client's connection breaks.
func (s *Server) Stop() {
	s.t.Helper()
	s.run("pg_ctl", "--pgdata", s.dir, "--mode", "immediate", "--wait", "stop")
}

func (s *Server) run(name string, args ...string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), serverTimeout)
	defer cancel()
	if out, err := s.command(ctx, name, args...).CombinedOutput(); err != nil {
		s.t.Fatalf("pgtest: %s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func (s *Server) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...)
	cmd.Dir = filepath.Dir(s.dir)
	if s.account != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.account}
	}
	return cmd
}

// serverBinaries is the directory of the newest installed PostgreSQL's
// initdb and pg_ctl.
func serverBinaries() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return majorVersion(a) - majorVersion(b) })
	for _, dir := range slices.Backward(dirs) {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		return "", fmt.Errorf("PostgreSQL's initdb is in neither /usr/lib/postgresql/*/bin nor the PATH: install the PostgreSQL server (`make services` does)")
	}
	return filepath.Dir(initdb), nil
}

// majorVersion is the <version> of /usr/lib/postgresql/<version>/bin.
func majorVersion(bin string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return v
}

// postgresAccount is the postgres user's uid and gid.
func postgresAccount() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, a test cluster needs the postgres user: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
