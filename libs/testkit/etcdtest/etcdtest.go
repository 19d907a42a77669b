package etcdtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/cronmesh/cronmesh/libs/testkit/freeport"
)

const (
	// readyTimeout bounds how long Start waits for the server to be ready to
	// serve clients; a local single member needs well under a second.
	readyTimeout = 30 * time.Second
	// startAttempts is how many times New tries fresh ports when a port it
	// picked was taken by someone else between picking and binding.
	startAttempts = 5
	// tickMs and electionMs: see the package doc (minimum lease TTL 1 s).
	tickMs     = 100
	electionMs = 600
	// dialTimeout bounds Client's initial connection.
	dialTimeout = 5 * time.Second
)

// Start starts a single-member etcd server named "default" with its data in
// dir, serving clients at clientURL (an http:// URL such as
// "http://127.0.0.1:2379"; the host must be an address this machine can bind)
// and peers on a free 127.0.0.1 port. It returns once the server is ready to
// serve (or after 30 s with an error). Existing data in dir is reused, so a
// development command keeps its keys across restarts; the peer port may
// differ between runs, which a single member does not mind.
//
// etcd's own logs go to logger (nil: errors only, to stderr), through a
// zap-to-slog bridge; etcd logs a lot at info level. The caller stops the
// server with Close on the returned *embed.Etcd. Unlike New, Start keeps
// etcd's fsync, so development data survives a crash of the machine.
func Start(dir, clientURL string, logger *slog.Logger) (*embed.Etcd, error) {
	cu, err := url.Parse(clientURL)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: client URL %q: %w", clientURL, err)
	}
	if cu.Scheme != "http" || cu.Host == "" {
		return nil, fmt.Errorf("etcdtest: client URL %q: want http://host:port", clientURL)
	}
	pu, err := freeURL()
	if err != nil {
		return nil, err
	}
	return start(newConfig(dir, *cu, pu, logger))
}

// newConfig builds the embed configuration shared by Start and New.
func newConfig(dir string, clientURL, peerURL url.URL, logger *slog.Logger) *embed.Config {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs = tickMs
	cfg.ElectionMs = electionMs
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(slogCore{h: logger.Handler()}))
	return cfg
}

// start starts the server and waits until it is ready, closing it on failure.
func start(cfg *embed.Config) (*embed.Etcd, error) {
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: start etcd: %w", err)
	}
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcdtest: etcd failed while starting: %w", err)
	case <-timer.C:
		e.Close()
		return nil, fmt.Errorf("etcdtest: etcd not ready after %s", readyTimeout)
	}
}

// freeURL returns http://127.0.0.1:<port> for a port that was free a moment
// ago: embed cannot listen on :0 for every URL (it must advertise the peer
// URL in the cluster configuration before binding). Another test may take
// it before etcd binds it; New retries on that clash.
func freeURL() (url.URL, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return url.URL{}, fmt.Errorf("etcdtest: %w", err)
	}
	return url.URL{Scheme: "http", Host: addr}, nil
}

// addrInUse reports whether err is a port clash (embed does not always wrap
// the listener error, hence the string fallback).
func addrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

// Cluster is one embedded etcd member owned by a test. Its methods are safe
// for concurrent use.
type Cluster struct {
	dir       string
	clientURL url.URL
	peerURL   url.URL
	cfg       func() *embed.Config
	// stopping silences etcd's logs while Stop closes the server: etcd
	// reports its listeners closing as errors ("setting up serving from
	// embedded etcd failed").
	stopping atomic.Bool

	mu   sync.Mutex
	etcd *embed.Etcd // nil while stopped
}

// New starts an etcd server for t on free 127.0.0.1 ports (trying fresh
// ports up to 5 times when one was taken meanwhile), with its data in
// t.TempDir(), fsync off (test data need not survive a power cut; it makes
// every write much faster) and only errors logged, to stderr. It fails the
// test if the server cannot start, and stops it at cleanup.
func New(t testing.TB) *Cluster {
	t.Helper()
	return newCluster(t, nil)
}

// ClientTLS is how a cluster of NewTLS serves its clients: its certificate
// and key, and, when ClientCAFile is set, the CA every client's certificate
// must chain to (etcd's --client-cert-auth).
type ClientTLS struct {
	CertFile, KeyFile, ClientCAFile string
}

// NewTLS is New with clients served over TLS: Endpoints are https:// URLs.
// Client does not work on such a cluster (it dials without TLS); the test
// builds its own client, as the code under test does.
func NewTLS(t testing.TB, files ClientTLS) *Cluster {
	t.Helper()
	return newCluster(t, &files)
}

func newCluster(t testing.TB, files *ClientTLS) *Cluster {
	t.Helper()
	var lastErr error
	for range startAttempts {
		c, err := tryNew(t.TempDir(), files)
		if err == nil {
			t.Cleanup(c.Stop)
			return c
		}
		lastErr = err
		if !addrInUse(err) {
			break
		}
	}
	t.Fatalf("etcdtest: %v", lastErr)
	return nil
}

func tryNew(dir string, files *ClientTLS) (*Cluster, error) {
	cu, err := freeURL()
	if err != nil {
		return nil, err
	}
	if files != nil {
		cu.Scheme = "https"
	}
	pu, err := freeURL()
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, clientURL: cu, peerURL: pu}
	logger := slog.New(unlessStopping{
		h:        slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}),
		stopping: &c.stopping,
	})
	c.cfg = func() *embed.Config {
		cfg := newConfig(c.dir, c.clientURL, c.peerURL, logger)
		cfg.UnsafeNoFsync = true
		if files != nil {
			cfg.ClientTLSInfo = transport.TLSInfo{
				CertFile: files.CertFile, KeyFile: files.KeyFile,
				TrustedCAFile: files.ClientCAFile, ClientCertAuth: files.ClientCAFile != "",
			}
			// bcrypt's minimum cost: tests that turn authentication on
			// check passwords without spending a core on each.
			cfg.BcryptCost = 4
		}
		return cfg
	}
	e, err := start(c.cfg())
	if err != nil {
		return nil, err
	}
	c.etcd = e
	return c, nil
}

// Endpoints returns the client URLs to give clientv3.Config.Endpoints. They
// stay the same across Stop and Restart.
func (c *Cluster) Endpoints() []string {
	return []string{c.clientURL.String()}
}

// Client returns a new client of the cluster, closed at t's cleanup (closing
// it earlier is harmless: tests close one to simulate a crashed node). Its
// logging is off: the client logs every retry while etcd is stopped.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints(),
		DialTimeout: dialTimeout,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcdtest: new client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Stop stops the server; clients see their requests fail or hang until
// Restart. Stopping a stopped cluster does nothing.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.etcd != nil {
		c.stopping.Store(true)
		c.etcd.Close()
		c.etcd = nil
	}
}

// Restart starts the server again on the same addresses with the same data
// (keys, revisions and leases survive: etcd restores leases with a fresh TTL,
// so a lease whose holder died while etcd was down still expires after its
// TTL). It fails t if the server cannot start, e.g. because another process
// took the port meanwhile. Restarting a running cluster does nothing.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.etcd != nil {
		return
	}
	c.stopping.Store(false)
	e, err := start(c.cfg())
	if err != nil {
		t.Fatalf("etcdtest: restart: %v", err)
	}
	c.etcd = e
}

// Wait blocks until the server answers a linearizable read through cli or ctx
// is done. Useful after Restart, before asserting on what clients observe.
func Wait(ctx context.Context, cli *clientv3.Client) error {
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Get(rctx, "health")
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return cmp.Or(ctx.Err(), err)
		}
	}
}

// unlessStopping drops every record while *stopping is set.
type unlessStopping struct {
	h        slog.Handler
	stopping *atomic.Bool
}

func (u unlessStopping) Enabled(ctx context.Context, l slog.Level) bool {
	return !u.stopping.Load() && u.h.Enabled(ctx, l)
}

func (u unlessStopping) Handle(ctx context.Context, r slog.Record) error {
	if u.stopping.Load() {
		return nil
	}
	return u.h.Handle(ctx, r)
}

func (u unlessStopping) WithAttrs(as []slog.Attr) slog.Handler {
	return unlessStopping{h: u.h.WithAttrs(as), stopping: u.stopping}
}

func (u unlessStopping) WithGroup(name string) slog.Handler {
	return unlessStopping{h: u.h.WithGroup(name), stopping: u.stopping}
}

// EnableAuth turns etcd's authentication on through cli (which must be
// allowed to: before auth is on, any client is), with a root user and user
// (password password) allowed to read and write under prefix only.
func EnableAuth(t testing.TB, cli *clientv3.Client, user, password, prefix string) {
	t.Helper()
	ctx := context.Background()
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "root-"+password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, user); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, user, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, user, password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, user, user); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("etcdtest: enable auth: %v", err)
		}
	}
}
