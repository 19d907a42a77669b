// Package cli is cronctl's command tree: parsing, configuration, the API
// clients and the commands. Run is the whole program, with its environment
// injected, so that tests run commands exactly as a person would.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1/alertingv1connect"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1/dispatcherv1connect"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1/triggerv1connect"
	"github.com/cronmesh/cronmesh/libs/rpcclient"
	"github.com/cronmesh/cronmesh/services/cronctl/internal/config"
	"github.com/cronmesh/cronmesh/services/cronctl/internal/output"
)

// Exit codes of cronctl.
const (
	ExitOK = 0
	// ExitError: a call failed or the input was wrong.
	ExitError = 1
	// ExitUsage: unknown command, bad flag or wrong arguments.
	ExitUsage = 2
	// ExitDiff: `apply --dry-run` found jobs to create or update.
	ExitDiff = 3
)

// Env is what a cronctl invocation may touch of the world.
type Env struct {
	Stdin     io.Reader
	Stdout    io.Writer
	Stderr    io.Writer
	LookupEnv func(string) (string, bool)
	// Home is the user's home directory, for the default config file; empty
	// means no default file.
	Home string
	// HTTPClient carries every call; nil means libs/rpcclient's (h2c to
	// http:// URLs, HTTP/2 over TLS to https:// ones, with the configured CA
	// and client certificate).
	HTTPClient *http.Client
	// ReadFile reads -f files; "-" is Stdin.
	ReadFile func(string) ([]byte, error)
	// Now is the current time, for relative times such as --since 1h; nil
	// means time.Now.
	Now func() time.Time
}

// usageError is a wrong invocation: exit 2 with the command's usage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// errDiff is returned by apply --dry-run when there is something to do.
var errDiff = errors.New("differences found")

// command is a node of the tree: a group with subcommands, or a leaf whose
// setup binds its flags to fs and returns the function that runs it.
type command struct {
	name    string
	args    string
	summary string
	subs    []*command
	setup   func(fs *flag.FlagSet) func(ctx context.Context, s *session, args []string) error
}

// tree is cronctl's command tree.
func tree() *command {
	return &command{name: "cronctl", subs: []*command{
		jobsCommand(),
		{name: "apply", args: "-f FILE", summary: "create or update the jobs a file declares (idempotent; --dry-run shows the diff)", setup: applySetup},
		deadLettersCommand(),
		{name: "rerun", args: "EXECUTION_ID [--target-url URL] [--body B] [--header K=V]", summary: "run a finished execution's job once more now, optionally with another URL, body or headers; the history records which execution it re-runs (registry)", setup: rerunSetup},
		{name: "cancel", args: "EXECUTION_ID", summary: "cancel an execution: queued, in flight or waiting for a retry (dispatcher)", setup: cancelSetup},
		{name: "backfill", args: "JOB_ID --from T [--to T] [--rate N]", summary: "fire a job's slots of a past range that the ledger does not hold (trigger)", setup: backfillSetup},
		{name: "slots", args: "JOB_ID [--limit N]", summary: "a job's slot ledger, newest first: fired or missed, and how (trigger)", setup: slotsSetup},
		historyCommand(),
		alertsCommand(),
		keysCommand(),
		auditCommand(),
		{name: "ring", summary: "the trigger tier's hash ring", subs: []*command{
			{name: "status", summary: "members and partition owners", setup: ringStatusSetup},
		}},
		{name: "config", summary: "cronctl's own configuration", subs: []*command{
			{name: "view", summary: "the resolved configuration and where each setting came from (API key redacted)", setup: configViewSetup},
		}},
	}}
}

// Run runs cronctl with args (without the program name) and returns the
// exit code. Everything it prints goes through writers that mask the API
// key.
func Run(ctx context.Context, args []string, env Env) int {
	stdout, stderr := env.Stdout, env.Stderr
	// Mask the key from wherever it may come before anything is printed,
	// even a usage error.
	var flagKey string
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--api-key="); ok {
			flagKey = v
		} else if (a == "--api-key" || a == "-api-key") && i+1 < len(args) {
			flagKey = args[i+1]
		}
	}
	var keys []string
	if flagKey != "" {
		keys = append(keys, flagKey)
	}
	if env.LookupEnv != nil {
		if k, ok := env.LookupEnv(config.EnvAPIKey); ok && k != "" {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		stdout, stderr = output.NewRedactor(stdout, k), output.NewRedactor(stderr, k)
	}
	env.Stdout, env.Stderr = stdout, stderr

	err := run(ctx, args, &env, &keys)
	var uerr usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.Is(err, errDiff):
		return ExitDiff
	case errors.As(err, &uerr):
		fmt.Fprintf(env.Stderr, "error: %s\n", uerr.msg)
		return ExitUsage
	default:
		output.Error(env.Stderr, err)
		return ExitError
	}
}

func run(ctx context.Context, args []string, env *Env, keys *[]string) error {
	node, path := tree(), []string{"cronctl"}
	// Global flags may stand before the command ("cronctl --config f jobs
	// list"); they are all string flags, so each takes the next argument
	// unless written as --flag=value.
	var leading []string
	for node.setup == nil {
		for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-h" && args[0] != "--help" {
			leading, args = append(leading, args[0]), args[1:]
			if !strings.Contains(leading[len(leading)-1], "=") && len(args) > 0 {
				leading, args = append(leading, args[0]), args[1:]
			}
		}
		if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
			printGroup(env.Stdout, node, path)
			if len(args) == 0 && len(path) > 1 {
				return usagef("%s: a subcommand is required", strings.Join(path, " "))
			}
			return nil
		}
		var next *command
		for _, c := range node.subs {
			if c.name == args[0] || (c.name == "deadletters" && args[0] == "dead-letters") {
				next = c
			}
		}
		if next == nil {
			printGroup(env.Stderr, node, path)
			return usagef("unknown command %q", strings.Join(append(path, args[0]), " "))
		}
		node, path, args = next, append(path, next.name), args[1:]
	}

	fs := flag.NewFlagSet(strings.Join(path, " "), flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	var g globalFlags
	g.register(fs)
	runFn := node.setup(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s [flags] %s\n\n%s\n\nflags:\n", strings.Join(path, " "), node.args, node.summary)
		fs.PrintDefaults()
	}
	positional, err := parseInterleaved(fs, append(leading, args...))
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}

	cfg, err := config.Resolve(g.flags(), env.LookupEnv, env.Home)
	if err != nil {
		return err
	}
	if cfg.APIKey != "" && !contains(*keys, cfg.APIKey) {
		// The key came from the config file: mask it too.
		*keys = append(*keys, cfg.APIKey)
		env.Stdout, env.Stderr = output.NewRedactor(env.Stdout, cfg.APIKey), output.NewRedactor(env.Stderr, cfg.APIKey)
	}
	s, err := newSession(cfg, env)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	return runFn(ctx, s, positional)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// parseInterleaved parses flags wherever they stand among the positional
// arguments ("jobs get ID -o json"), which the flag package alone stops at.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

func printGroup(w io.Writer, node *command, path []string) {
	fmt.Fprintf(w, "usage: %s <command> [flags]\n\ncommands:\n", strings.Join(path, " "))
	subs := append([]*command(nil), node.subs...)
	if len(path) > 1 {
		sort.Slice(subs, func(i, j int) bool { return subs[i].name < subs[j].name })
	}
	for _, c := range subs {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun '%s <command> -h' for a command's flags.\n", strings.Join(path, " "))
}

// globalFlags are accepted by every command.
type globalFlags struct {
	configPath, registryURL, triggerURL, dispatcherURL, historyURL, alertingURL, apiKey, output, timeout string
	caFile, clientCert, clientKey                                                                        string
}

func (g *globalFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.configPath, "config", "", "config file (default $CRONMESH_CONFIG or ~/.config/cronmesh/cronctl.yaml)")
	fs.StringVar(&g.registryURL, "registry-url", "", "JobService URL (env CRONMESH_REGISTRY_URL; default "+config.DefaultRegistryURL+")")
	fs.StringVar(&g.triggerURL, "trigger-url", "", "TriggerService URL (env CRONMESH_TRIGGER_URL; default "+config.DefaultTriggerURL+")")
	fs.StringVar(&g.dispatcherURL, "dispatcher-url", "", "DispatchService URL (env CRONMESH_DISPATCHER_URL; default "+config.DefaultDispatcherURL+")")
	fs.StringVar(&g.historyURL, "history-url", "", "HistoryService URL (env CRONMESH_HISTORY_URL; default "+config.DefaultHistoryURL+")")
	fs.StringVar(&g.alertingURL, "alerting-url", "", "AlertService URL (env CRONMESH_ALERTING_URL; default "+config.DefaultAlertingURL+")")
	fs.StringVar(&g.apiKey, "api-key", "", "API key (prefer env CRONMESH_API_KEY or the config file: flags show in the process list)")
	fs.StringVar(&g.output, "o", "", "output: table, json or yaml (env CRONMESH_OUTPUT; default table)")
	fs.StringVar(&g.output, "output", "", "same as -o")
	fs.StringVar(&g.timeout, "timeout", "", "per-command timeout (env CRONMESH_TIMEOUT; default 30s)")
	fs.StringVar(&g.caFile, "ca-file", "", "PEM CA that https:// services' certificates chain to (env CRONMESH_CA_FILE; default the system's CAs)")
	fs.StringVar(&g.clientCert, "client-cert", "", "PEM client certificate for services that require one, mutual TLS (env CRONMESH_CLIENT_CERT; with --client-key)")
	fs.StringVar(&g.clientKey, "client-key", "", "PEM key of --client-cert (env CRONMESH_CLIENT_KEY)")
}

func (g *globalFlags) flags() config.Flags {
	return config.Flags{
		ConfigPath: g.configPath, RegistryURL: g.registryURL, TriggerURL: g.triggerURL,
		DispatcherURL: g.dispatcherURL, HistoryURL: g.historyURL, AlertingURL: g.alertingURL, APIKey: g.apiKey, Output: g.output, Timeout: g.timeout,
		CAFile: g.caFile, ClientCert: g.clientCert, ClientKey: g.clientKey,
	}
}

// session is one command's configuration, clients and printer.
type session struct {
	cfg        config.Config
	env        *Env
	out        *output.Printer
	jobs       registryv1connect.JobServiceClient
	keys       registryv1connect.KeyServiceClient
	trigger    triggerv1connect.TriggerServiceClient
	dispatcher dispatcherv1connect.DispatchServiceClient
	history    historyv1connect.HistoryServiceClient
	alerts     alertingv1connect.AlertServiceClient
	// now is the time relative times (--since 1h) count from.
	now func() time.Time
}

func newSession(cfg config.Config, env *Env) (*session, error) {
	httpClient := env.HTTPClient
	if httpClient == nil {
		var err error
		if httpClient, err = rpcclient.NewHTTPClient(cfg.TLS()); err != nil {
			return nil, err
		}
	}
	now := env.Now
	if now == nil {
		now = time.Now
	}
	opts := []connect.ClientOption{connect.WithInterceptors(bearer(cfg.APIKey))}
	return &session{
		cfg:        cfg,
		env:        env,
		out:        output.NewPrinter(env.Stdout, output.Format(cfg.Output)),
		jobs:       registryv1connect.NewJobServiceClient(httpClient, cfg.RegistryURL, opts...),
		keys:       registryv1connect.NewKeyServiceClient(httpClient, cfg.RegistryURL, opts...),
		trigger:    triggerv1connect.NewTriggerServiceClient(httpClient, cfg.TriggerURL, opts...),
		dispatcher: dispatcherv1connect.NewDispatchServiceClient(httpClient, cfg.DispatcherURL, opts...),
		history:    historyv1connect.NewHistoryServiceClient(httpClient, cfg.HistoryURL, opts...),
		alerts:     alertingv1connect.NewAlertServiceClient(httpClient, cfg.AlertingURL, opts...),
		now:        now,
	}, nil
}

// bearer sends the API key as "Authorization: Bearer <key>" (libs/apikey).
func bearer(key string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if key != "" {
				req.Header().Set("Authorization", "Bearer "+key)
			}
			return next(ctx, req)
		}
	}
}

// exactArgs checks the number of positional arguments.
func exactArgs(args []string, names ...string) error {
	if len(args) != len(names) {
		return usagef("want %d argument(s) (%s), got %d", len(names), strings.Join(names, " "), len(args))
	}
	return nil
}

// mask makes every later output of the command mask secret too (a channel's
// signing secret or SMTP password that the command read), errors included:
// Run prints the final error through env.Stderr.
func (s *session) mask(secret string) {
	if secret == "" {
		return
	}
	s.env.Stdout, s.env.Stderr = output.NewRedactor(s.env.Stdout, secret), output.NewRedactor(s.env.Stderr, secret)
	s.out = output.NewPrinter(s.env.Stdout, s.out.Format())
}
