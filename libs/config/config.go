package config

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cronmesh/cronmesh/libs/ratelimit"
	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

// Defaults of the common settings, exported so services and tooling (for
// example `make dev`) agree on them.
const (
	// DefaultPostgresURL is the local development PostgreSQL database.
	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/cronmesh?sslmode=disable"
	// DefaultAMQPURL is the local development RabbitMQ broker.
	DefaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
	// DefaultEtcdEndpoint is the local development etcd member.
	DefaultEtcdEndpoint = "127.0.0.1:2379"
	// DefaultLogLevel is the log level when none is given.
	DefaultLogLevel = "info"
	// DefaultShutdownTimeout bounds graceful shutdown when none is given.
	DefaultShutdownTimeout = 15 * time.Second
	// DefaultAuditRetention is how long audit records are kept: 90 days.
	DefaultAuditRetention = 90 * 24 * time.Hour
)

// EnvPrefix is prepended to the upper-cased flag name to form the name of the
// environment variable that backs a flag.
const EnvPrefix = "CRONMESH_"

// Common holds the settings every service shares. Register binds its fields
// to flags; until then it holds whatever the caller put there.
type Common struct {
	// Listen is the host:port the service serves on (--listen, CRONMESH_LISTEN).
	Listen string
	// PostgresURL is the database URL (--postgres-url, CRONMESH_POSTGRES_URL).
	PostgresURL string
	// AMQPURL is the message broker URL (--amqp-url, CRONMESH_AMQP_URL).
	AMQPURL string
	// OTLPEndpoint is the host:port of an OTLP/gRPC collector
	// (--otlp-endpoint, CRONMESH_OTLP_ENDPOINT); empty turns span export off.
	OTLPEndpoint string
	// EtcdEndpoints are the etcd members, comma separated on the command line
	// (--etcd-endpoints, CRONMESH_ETCD_ENDPOINTS).
	EtcdEndpoints []string
	// EtcdTLS is how the etcd client reaches the members over TLS: the CA
	// (--etcd-ca-file) and, for client certificate authentication, a
	// certificate and key (--etcd-cert, --etcd-key). TLS is on as soon as
	// one is given or an endpoint is an https:// URL.
	EtcdTLS tlsconfig.Client
	// EtcdUsername and EtcdPassword authenticate to etcd when etcd's auth
	// is enabled (--etcd-username, --etcd-password; the password preferably
	// from CRONMESH_ETCD_PASSWORD: flags show in the process list).
	EtcdUsername string
	EtcdPassword string
	// TLS is the listener's TLS: its certificate and key (--tls-cert,
	// --tls-key) and, for mutual TLS, the CA clients' certificates must
	// chain to (--tls-client-ca). All empty: HTTP/1.1 and h2c, no TLS.
	TLS tlsconfig.Server
	// LogLevel is one of debug, info, warn, error (--log-level,
	// CRONMESH_LOG_LEVEL); any other value is rejected at parse time.
	LogLevel string
	// ShutdownTimeout bounds graceful shutdown (--shutdown-timeout,
	// CRONMESH_SHUTDOWN_TIMEOUT), a Go duration such as "15s".
	ShutdownTimeout time.Duration
	// Pprof serves net/http/pprof under /debug/pprof/ (--pprof,
	// CRONMESH_PPROF). Off by default.
	Pprof bool
	// RateLimit is each API key's requests per second on the service's API
	// (--rate-limit, --rate-limit-namespaces, --rate-limit-keys; see
	// libs/ratelimit). The zero value limits nothing.
	RateLimit ratelimit.Config
	// Limits bound the requests the service's server reads:
	// --max-request-bytes, --read-timeout, --write-timeout, --idle-timeout
	// and --max-header-bytes (CRONMESH_MAX_REQUEST_BYTES, ...), defaults
	// those of package server; a MaxRequestBytes set before Register is
	// that service's default instead.
	Limits server.Limits
	// AuditRetention is how long the service keeps its audit log's records
	// (--audit-retention, CRONMESH_AUDIT_RETENTION; libs/audit).
	AuditRetention time.Duration
}

// Register adds the common flags to fs, with defaultListen as the default of
// --listen (each service has its own, e.g. "127.0.0.1:8081"). It overwrites
// the fields of c with the defaults. Registering twice on the same fs panics,
// as flag.FlagSet does for any duplicate flag.
func (c *Common) Register(fs *flag.FlagSet, defaultListen string) {
	fs.StringVar(&c.Listen, "listen", defaultListen, "host:port to serve on")
	fs.StringVar(&c.PostgresURL, "postgres-url", DefaultPostgresURL, "PostgreSQL connection URL")
	fs.StringVar(&c.AMQPURL, "amqp-url", DefaultAMQPURL, "AMQP (RabbitMQ) connection URL")
	fs.StringVar(&c.OTLPEndpoint, "otlp-endpoint", "", "host:port of an OTLP/gRPC trace collector; empty disables export")
	c.EtcdEndpoints = []string{DefaultEtcdEndpoint}
	fs.Var((*StringList)(&c.EtcdEndpoints), "etcd-endpoints", "comma separated etcd endpoints")
	fs.StringVar(&c.EtcdTLS.CAFile, "etcd-ca-file", "", "PEM file of the CA etcd's certificates chain to (turns TLS to etcd on; default the system's CAs when another TLS flag is set)")
	fs.StringVar(&c.EtcdTLS.CertFile, "etcd-cert", "", "PEM client certificate presented to etcd (with --etcd-key)")
	fs.StringVar(&c.EtcdTLS.KeyFile, "etcd-key", "", "PEM key of --etcd-cert")
	fs.StringVar(&c.EtcdUsername, "etcd-username", "", "etcd user, when etcd's authentication is enabled")
	fs.StringVar(&c.EtcdPassword, "etcd-password", "", "password of --etcd-username (prefer env CRONMESH_ETCD_PASSWORD: flags show in the process list)")
	fs.StringVar(&c.TLS.CertFile, "tls-cert", "", "PEM certificate chain of the listener; with --tls-key, serves HTTP/2 over TLS instead of h2c")
	fs.StringVar(&c.TLS.KeyFile, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&c.TLS.ClientCAFile, "tls-client-ca", "", "PEM CA that clients' certificates must chain to (mutual TLS; needs --tls-cert)")
	c.LogLevel = DefaultLogLevel
	fs.Var((*logLevel)(&c.LogLevel), "log-level", "log level: debug, info, warn or error")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", DefaultShutdownTimeout, "graceful shutdown timeout")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ (for profiling; off in production)")
	fs.DurationVar(&c.AuditRetention, "audit-retention", DefaultAuditRetention, "how long the audit log of the calls that changed state is kept")
	fs.IntVar(&c.Limits.MaxRequestBytes, "max-request-bytes", cmp.Or(c.Limits.MaxRequestBytes, server.DefaultMaxRequestBytes),
		"largest request message accepted, in bytes, after decompression (and, with framing, its raw body); beyond it RESOURCE_EXHAUSTED")
	fs.DurationVar(&c.Limits.ReadTimeout, "read-timeout", server.DefaultReadTimeout, "time to read a request's headers and body")
	fs.DurationVar(&c.Limits.WriteTimeout, "write-timeout", server.DefaultWriteTimeout, "time from the end of a request's headers to the end of its response")
	fs.DurationVar(&c.Limits.IdleTimeout, "idle-timeout", server.DefaultIdleTimeout, "idle keep-alive connections are closed after this")
	fs.IntVar(&c.Limits.MaxHeaderBytes, "max-header-bytes", server.DefaultMaxHeaderBytes, "largest request header block, in bytes")
	c.RateLimit.Register(fs)
}

// Shared returns c. Through embedding, every service's configuration
// answers it, which is how libs/servicemain finds the log level and the
// shutdown timeout of a configuration it knows only as a type parameter.
func (c Common) Shared() Common { return c }

// Validate checks what the flags cannot check one by one: --tls-cert and
// --tls-key go together, --tls-client-ca needs them, --etcd-cert and
// --etcd-key go together, and --etcd-password needs --etcd-username. It
// then reads the TLS files named, so a missing file, a malformed one or a
// key that does not match its certificate stops a service before it
// connects anywhere. servicemain runs it after parsing, so a service
// refuses to start with a half-configured TLS instead of serving in clear.
func (c Common) Validate() error {
	var errs []error
	switch err := c.TLS.Validate(); {
	case errors.Is(err, tlsconfig.ErrIncompletePair):
		errs = append(errs, errors.New("--tls-cert and --tls-key go together: give both or neither"))
	case errors.Is(err, tlsconfig.ErrClientCAWithoutCert):
		errs = append(errs, errors.New("--tls-client-ca needs --tls-cert and --tls-key: client certificates are asked for over TLS only"))
	case err == nil:
		if _, err := c.TLS.Config(); err != nil {
			errs = append(errs, fmt.Errorf("--tls-cert, --tls-key, --tls-client-ca: %w", err))
		}
	}
	switch {
	case c.EtcdTLS.Validate() != nil:
		errs = append(errs, errors.New("--etcd-cert and --etcd-key go together: give both or neither"))
	case c.EtcdTLS != (tlsconfig.Client{}):
		if _, err := c.EtcdTLS.Config(); err != nil {
			errs = append(errs, fmt.Errorf("--etcd-ca-file, --etcd-cert, --etcd-key: %w", err))
		}
	}
	if c.EtcdPassword != "" && c.EtcdUsername == "" {
		errs = append(errs, errors.New("--etcd-password needs --etcd-username"))
	}
	return errors.Join(errs...)
}

// EnvName returns the environment variable that backs the flag named name:
// CRONMESH_ followed by name upper-cased with '-' (and '.') replaced by '_'.
func EnvName(name string) string {
	return EnvPrefix + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(name))
}

// Parse parses args into fs, then, for every flag of fs (the service's own
// flags too) not set on the command line, applies the environment variable
// named by EnvName if lookupEnv reports it present, through fs.Set so the same
// validation applies. A variable that is present but empty is applied too
// (it sets the flag to ""), which lets an operator blank a default.
//
// lookupEnv is injected (os.LookupEnv in main) so tests need no real
// environment; nil means no environment. An invalid environment value is an
// error naming the variable. Parse returns flag.ErrHelp unchanged for -h, and
// fs's own parse errors unchanged, so callers can treat them as usual.
func Parse(fs *flag.FlagSet, args []string, lookupEnv func(string) (string, bool)) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if lookupEnv == nil {
		return nil
	}
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		env := EnvName(f.Name)
		v, ok := lookupEnv(env)
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("invalid value %q for environment variable %s: %w", v, env, err))
		}
	})
	return errors.Join(errs...)
}

// StringList is a flag.Value for a comma separated list. Set replaces the
// whole list (it does not append), so an environment value or a later flag
// overrides the default instead of adding to it. Items are trimmed of spaces
// and empty items are dropped, so "a, b,," is [a b] and "" is the empty list.
type StringList []string

// String returns the items joined by commas; safe on a nil receiver, as the
// flag package requires.
func (l *StringList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

// Set replaces the list with the comma separated items of v.
func (l *StringList) Set(v string) error {
	items := []string{}
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	*l = items
	return nil
}

// Get returns a copy of the items as []string (flag.Getter); nil for a nil
// receiver.
func (l *StringList) Get() any {
	if l == nil {
		return []string(nil)
	}
	return slices.Clone([]string(*l))
}

// logLevel validates --log-level at parse time, so a typo fails fast at
// startup instead of silently logging at the wrong level.
type logLevel string

func (l *logLevel) String() string {
	if l == nil {
		return ""
	}
	return string(*l)
}

func (l *logLevel) Set(v string) error {
	v = strings.ToLower(strings.TrimSpace(v))
	switch v {
	case "debug", "info", "warn", "error":
		*l = logLevel(v)
		return nil
	}
	return fmt.Errorf("unknown log level %q (want debug, info, warn or error)", v)
}
