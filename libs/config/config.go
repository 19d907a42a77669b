package config

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"
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
	// LogLevel is one of debug, info, warn, error (--log-level,
	// CRONMESH_LOG_LEVEL); any other value is rejected at parse time.
	LogLevel string
	// ShutdownTimeout bounds graceful shutdown (--shutdown-timeout,
	// CRONMESH_SHUTDOWN_TIMEOUT), a Go duration such as "15s".
	ShutdownTimeout time.Duration
	// Pprof serves net/http/pprof under /debug/pprof/ (--pprof,
	// CRONMESH_PPROF). Off by default.
	Pprof bool
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
	c.LogLevel = DefaultLogLevel
	fs.Var((*logLevel)(&c.LogLevel), "log-level", "log level: debug, info, warn or error")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", DefaultShutdownTimeout, "graceful shutdown timeout")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ (for profiling; off in production)")
	fs.DurationVar(&c.AuditRetention, "audit-retention", DefaultAuditRetention, "how long the audit log of the calls that changed state is kept")
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
