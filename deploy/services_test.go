package deploy_test

import (
	"bytes"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/keyring"
)

// root is the repository root, seen from this package's directory.
const root = ".."

// services are the cronmesh services, each with a Dockerfile, a subchart
// and a default port (its --listen default).
var services = append(slices.Clone(apiServices), "console")

// apiServices are the five services that serve the APIs: each reads the
// Secret (API keys, database and broker passwords) and connects to
// PostgreSQL and RabbitMQ. The console is not one: it forwards the browser's
// calls to them and holds no credential.
var apiServices = []string{"registry", "trigger", "dispatcher", "history", "alerting"}

// present reports whether the service's command is in this tree.
func present(svc string) bool {
	_, err := os.Stat(filepath.Join(root, "services", svc, "cmd", svc))
	return err == nil
}

func TestEveryServiceIsInTheTree(t *testing.T) {
	t.Parallel()
	for _, svc := range services {
		require.Truef(t, present(svc), "services/%s/cmd/%s is missing", svc, svc)
	}
}

// appSource is the file holding the service's Config.Register.
func appSource(svc string) string {
	return filepath.Join(root, "services", svc, "internal", "app", "app.go")
}

// ownFlags reads the service's own flags (name to the FlagSet method that
// registers it) from the source of its Config.Register: every fs.<Method>
// call whose first string literal argument is the flag's name. Reading the
// source, not importing the package, because services/*/internal is not
// importable from here.
func ownFlags(t *testing.T, svc string) map[string]string {
	t.Helper()
	require.Truef(t, present(svc), "services/%s is missing", svc)
	file, err := parser.ParseFile(token.NewFileSet(), appSource(svc), nil, 0)
	require.NoError(t, err)
	flags := map[string]string{}
	for _, decl := range file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "Register" || fn.Recv == nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "fs" {
				return true
			}
			for _, arg := range call.Args {
				if lit, ok := arg.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					name, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					flags[name] = sel.Sel.Name
					break
				}
			}
			return true
		})
	}
	require.NotEmptyf(t, flags, "no flags found in %s's Config.Register", svc)
	return flags
}

var defaultListenRE = regexp.MustCompile(`DefaultListen\s*=\s*"([^"]+)"`)

// defaultListen is the service's --listen default (its DefaultListen).
func defaultListen(t *testing.T, svc string) string {
	t.Helper()
	require.Truef(t, present(svc), "services/%s is missing", svc)
	src, err := os.ReadFile(appSource(svc))
	require.NoError(t, err)
	m := defaultListenRE.FindSubmatch(src)
	require.NotNilf(t, m, "no DefaultListen in %s", appSource(svc))
	return string(m[1])
}

// flagSet is a FlagSet with the service's flags: the common ones exactly as
// libs/config (and libs/keyring) register them, its own with the same kind of value (strings
// for custom flag.Values), so values set through it are validated much as
// the service validates them.
func flagSet(t *testing.T, svc string) *flag.FlagSet {
	t.Helper()
	fs := flag.NewFlagSet(svc, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var common config.Common
	common.Register(fs, defaultListen(t, svc))
	// The key ring's flags, exactly as libs/keyring registers them: all of
	// them, or only the refresh interval (the registry).
	src, err := os.ReadFile(appSource(svc))
	require.NoError(t, err)
	// service.RegisterFlags registers both, as libs/service does.
	var keys keyring.Config
	all := bytes.Contains(src, []byte("service.RegisterFlags(fs, "))
	switch {
	case all || bytes.Contains(src, []byte("c.Keys.Register(fs)")):
		keys.Register(fs)
	case bytes.Contains(src, []byte("c.Keys.RegisterRefresh(fs)")):
		keys.RegisterRefresh(fs)
	}
	if all || bytes.Contains(src, []byte("keyring.RegisterAPIKeys(fs, ")) {
		keyring.RegisterAPIKeys(fs, new(config.StringList))
	}
	for name, method := range ownFlags(t, svc) {
		switch method {
		case "IntVar", "Int":
			fs.Int(name, 0, "")
		case "DurationVar", "Duration":
			fs.Duration(name, 0, "")
		case "BoolVar", "Bool":
			fs.Bool(name, false, "")
		default:
			fs.String(name, "", "")
		}
	}
	return fs
}

func TestFlagSets(t *testing.T) {
	t.Parallel()
	for _, svc := range apiServices {
		fs := flagSet(t, svc)
		for _, name := range []string{"listen", "postgres-url", "amqp-url", "api-keys", "schema"} {
			require.NotNilf(t, fs.Lookup(name), "%s has no --%s", svc, name)
		}
	}
	require.NotNil(t, flagSet(t, "trigger").Lookup("node-id"))
	console := flagSet(t, "console")
	for _, name := range append(consoleUpstreamFlags(), "listen", "upstream-ca-file", "upstream-client-cert", "upstream-client-key") {
		require.NotNilf(t, console.Lookup(name), "the console has no --%s", name)
	}
	require.Nil(t, console.Lookup("api-keys"), "the console holds no key")
}

// consoleUpstreamFlags are the console's flags naming the API services it
// forwards to: --<service>-url.
func consoleUpstreamFlags() []string {
	var flags []string
	for _, svc := range apiServices {
		flags = append(flags, svc+"-url")
	}
	return flags
}
