package amqptest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/cronmesh/cronmesh/libs/testkit/freeport"
)

const (
	// bootTimeout bounds a node's boot and each start_app: RabbitMQ boots in
	// seconds, more on a machine busy with other tests.
	bootTimeout = 2 * time.Minute
	// haltTimeout bounds a node's graceful halt at cleanup; past it the
	// node is killed.
	haltTimeout = 30 * time.Second
)

// Server is a RabbitMQ node of one test's own, with its own data in a
// temporary directory: a test that stops and restarts the broker uses
// one, so that the node every other test shares stays up and the test can
// run beside them. It runs the machine's RabbitMQ (Debian's
// /usr/lib/rabbitmq/bin, else rabbitmq-server on the PATH) as the test's
// own user, with an Erlang cookie of its own.
type Server struct {
	t    testing.TB
	bin  string // directory of rabbitmq-server and rabbitmqctl
	node string // Erlang node name
	env  []string
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when the node's process has exited
	log  bytes.Buffer  // the node's standard output and error
}

// NewServer boots a node listening on 127.0.0.1 at a free port, with the
// default guest user, and returns once it accepts AMQP connections.
// t.Cleanup halts it and removes its directory. It fails the test when
// RabbitMQ is not installed or the node does not boot.
func NewServer(t testing.TB) *Server {
	t.Helper()
	bin, err := rabbitBinaries()
	if err != nil {
		t.Fatalf("amqptest: %v", err)
	}
	dir, err := os.MkdirTemp("", "cronmesh-rabbitmq-")
	if err != nil {
		t.Fatalf("amqptest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ports, err := freeport.Ports(2)
	if err != nil {
		t.Fatalf("amqptest: %v", err)
	}
	port, distPort := ports[0], ports[1]
	var id [8]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails (it crashes the program instead)
	s := &Server{t: t, bin: bin, node: "cronmesh-test-" + hex.EncodeToString(id[:4]) + "@localhost", port: port, done: make(chan struct{})}

	// The node's files, none of the machine's: its configuration (the
	// machine's may name the shared node's port), no plugins, and an Erlang
	// cookie in a home of its own, which the CLI reads too.
	home := filepath.Join(dir, "home")
	files := map[string]string{
		filepath.Join(dir, "rabbitmq.conf"):     fmt.Sprintf("listeners.tcp.local = 127.0.0.1:%d\n", port),
		filepath.Join(dir, "rabbitmq-env.conf"): "",
		filepath.Join(dir, "enabled_plugins"):   "[].\n",
		filepath.Join(home, ".erlang.cookie"):   hex.EncodeToString(id[:]) + hex.EncodeToString(id[:]),
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatalf("amqptest: %v", err)
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o400); err != nil {
			t.Fatalf("amqptest: %v", err)
		}
	}
	s.env = append(os.Environ(),
		"HOME="+home,
		"RABBITMQ_NODENAME="+s.node,
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", distPort),
		"ERL_EPMD_ADDRESS=127.0.0.1",
	)

	s.cmd = exec.Command(filepath.Join(bin, "rabbitmq-server"))
	s.cmd.Env = s.env
	s.cmd.Stdout, s.cmd.Stderr = &s.log, &s.log
	// A process group of its own, so that cleanup can kill the Erlang VM
	// the script starts as well as the script.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("amqptest: starting RabbitMQ: %v", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(s.halt)
	s.awaitAMQP()
	return s
}

// URL is the node's AMQP URL, as the guest user.
func (s *Server) URL() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", s.port) }

// StopApp stops the RabbitMQ application (rabbitmqctl stop_app): every
// connection closes and new ones are refused, while the Erlang node, and
// the queues' data on disk, stay.
func (s *Server) StopApp() {
	s.t.Helper()
	s.ctl("stop_app")
}

// StartApp starts the application again and returns once it accepts AMQP
// connections.
func (s *Server) StartApp() {
	s.t.Helper()
	s.ctl("start_app")
	s.awaitAMQP()
}

func (s *Server) ctl(args ...string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, "rabbitmqctl"), append([]string{"-n", s.node}, args...)...)
	cmd.Env = s.env
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("amqptest: rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// awaitAMQP returns once an AMQP connection to the node succeeds.
func (s *Server) awaitAMQP() {
	s.t.Helper()
	deadline := time.Now().Add(bootTimeout)
	for {
		conn, err := amqp091.DialConfig(s.URL(), amqp091.Config{Dial: amqp091.DefaultDial(time.Second)})
		if err == nil {
			_ = conn.Close()
			return
		}
		select {
		case <-s.done:
			s.t.Fatalf("amqptest: the RabbitMQ node exited: %v\n%s", s.cmd.ProcessState, s.log.String())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("amqptest: the RabbitMQ node accepted no connection within %s: %v", bootTimeout, err)
		}
	}
}

// halt stops the node (rabbitmqctl stop halts the VM) and kills its
// process group if it has not exited within haltTimeout.
func (s *Server) halt() {
	ctx, cancel := context.WithTimeout(context.Background(), haltTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, "rabbitmqctl"), "-n", s.node, "stop")
	cmd.Env = s.env
	_ = cmd.Run()
	select {
	case <-s.done:
	case <-ctx.Done():
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

// rabbitBinaries is the directory of rabbitmq-server and rabbitmqctl that
// run as the calling user: Debian's /usr/sbin scripts switch to the
// rabbitmq user, whose cookie is not the node's.
func rabbitBinaries() (string, error) {
	if _, err := os.Stat("/usr/lib/rabbitmq/bin/rabbitmq-server"); err == nil {
		return "/usr/lib/rabbitmq/bin", nil
	}
	server, err := exec.LookPath("rabbitmq-server")
	if err != nil {
		return "", errors.New("rabbitmq-server is in neither /usr/lib/rabbitmq/bin nor the PATH: install RabbitMQ (`make services` does)")
	}
	return filepath.Dir(server), nil
}
