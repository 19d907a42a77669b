package deploy_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper-cased: FROM, RUN, COPY...
	args string
}

// stage is the instructions of one FROM and the base it names.
type stage struct {
	base, name string
	body       []instruction
}

func parseDockerfile(t *testing.T, path string) (args map[string]string, stages []stage) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	args = map[string]string{}
	var lines []string
	var cont strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(line, `\`); ok {
			cont.WriteString(s + " ")
			continue
		}
		cont.WriteString(line)
		lines = append(lines, cont.String())
		cont.Reset()
	}
	require.NoError(t, sc.Err())
	for _, line := range lines {
		cmd, rest, _ := strings.Cut(line, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(rest)}
		switch {
		case in.cmd == "FROM":
			f := strings.Fields(in.args)
			st := stage{base: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
		case len(stages) == 0:
			require.Equalf(t, "ARG", in.cmd, "%s: %s before the first FROM", path, in.cmd)
			name, value, _ := strings.Cut(in.args, "=")
			args[name] = value
		default:
			stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
		}
	}
	return args, stages
}

var goDirectiveRE = regexp.MustCompile(`(?m)^go\s+(\S+)\s*$`)

func TestDockerfiles(t *testing.T) {
	t.Parallel()
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	goVersion := goDirectiveRE.FindSubmatch(gomod)
	require.NotNil(t, goVersion, "no go directive in go.mod")

	files, err := filepath.Glob(filepath.Join(root, "deploy", "docker", "*.Dockerfile"))
	require.NoError(t, err)
	var got []string
	for _, f := range files {
		got = append(got, strings.TrimSuffix(filepath.Base(f), ".Dockerfile"))
	}
	require.ElementsMatch(t, services, got, "one Dockerfile per service")

	for _, svc := range services {
		t.Run(svc, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(root, "deploy", "docker", svc+".Dockerfile")
			args, stages := parseDockerfile(t, path)
			require.GreaterOrEqual(t, len(stages), 2, "multi-stage")

			// The builder is the one Go stage; the console's application is
			// built before it, in a Node stage (checkWebStage).
			builders := slices.DeleteFunc(slices.Clone(stages), func(st stage) bool { return st.base != "golang:${GO_VERSION}" })
			require.Len(t, builders, 1, "one builder stage, on the Go image")
			build, final := builders[0], stages[len(stages)-1]
			require.Equal(t, string(goVersion[1]), args["GO_VERSION"], "GO_VERSION is go.mod's go directive")
			require.NotEmpty(t, build.name, "the builder stage is named")

			var web string
			if svc == "console" {
				web = checkWebStage(t, args, stages)
			}
			var static, built, embedded bool
			for _, in := range build.body {
				if web != "" && in.cmd == "COPY" && in.args == "--from="+web+" /src/"+consoleDist+"/ ./"+consoleDist+"/" {
					embedded = true
				}
				if (in.cmd == "ENV" || in.cmd == "RUN") && regexp.MustCompile(`\bCGO_ENABLED=0\b`).MatchString(in.args) {
					static = true
				}
				if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
					require.True(t, static, "CGO_ENABLED=0 is set before go build")
					require.Truef(t, web == "" || embedded, "the builder copies %s from the %s stage before go build", consoleDist, web)
					require.Contains(t, in.args, "-o /out/"+svc+" ./services/"+svc+"/cmd/"+svc,
						"builds the service's command into /out/"+svc)
					built = true
				}
			}
			require.True(t, built, "the builder runs go build")

			require.Contains(t, []string{"scratch"}, final.base, "the final stage is scratch")
			var user, entry string
			var copied bool
			for _, in := range final.body {
				switch in.cmd {
				case "USER":
					user = in.args
				case "ENTRYPOINT":
					entry = in.args
				case "COPY":
					if in.args == "--from="+build.name+" /out/"+svc+" /"+svc {
						copied = true
					}
				case "RUN":
					t.Errorf("the final stage runs %q: scratch has no shell", in.args)
				}
			}
			require.True(t, copied, "the final stage copies /out/%s from the builder to /%s", svc, svc)
			require.Equal(t, `["/`+svc+`"]`, entry)
			uid, _, _ := strings.Cut(user, ":")
			n, err := strconv.Atoi(uid)
			require.NoErrorf(t, err, "USER %q must be numeric, so Kubernetes can check runAsNonRoot", user)
			require.NotZero(t, n, "USER is not root")
		})
	}
}

// consoleDist is where vite writes the console's application and go:embed
// takes it from.
const consoleDist = "services/console/internal/assets/dist"

// checkWebStage checks the console's Node stage and returns its name: a
// Node the console's package.json accepts, the packages installed from the
// lockfile (npm ci, never npm install), then the build that `make build`
// runs (type-check and vite).
func checkWebStage(t *testing.T, args map[string]string, stages []stage) string {
	t.Helper()
	i := slices.IndexFunc(stages, func(st stage) bool { return strings.HasPrefix(st.base, "node:${NODE_VERSION}") })
	require.GreaterOrEqual(t, i, 0, "the console's application is built in a node:${NODE_VERSION} stage")
	web := stages[i]
	require.NotEmpty(t, web.name, "the Node stage is named")

	raw, err := os.ReadFile(filepath.Join(root, "services", "console", "web", "package.json"))
	require.NoError(t, err)
	var pkg struct {
		Engines struct {
			Node string `json:"node"`
		} `json:"engines"`
	}
	require.NoError(t, json.Unmarshal(raw, &pkg))
	minimum, ok := strings.CutPrefix(pkg.Engines.Node, ">=")
	require.Truef(t, ok, "package.json's engines.node %q is not a >= range", pkg.Engines.Node)
	require.Truef(t, versionAtLeast(t, args["NODE_VERSION"], minimum), "NODE_VERSION %s is older than package.json's engines.node %s", args["NODE_VERSION"], pkg.Engines.Node)

	var installed, built bool
	for _, in := range web.body {
		if in.cmd != "RUN" {
			continue
		}
		require.NotContains(t, in.args, "npm install", "the packages come from the lockfile: npm ci")
		if strings.Contains(in.args, "npm ci") {
			installed = true
		}
		if strings.Contains(in.args, "npm run build") {
			require.True(t, installed, "npm ci runs before the build")
			built = true
		}
	}
	require.True(t, built, "the Node stage runs npm run build")
	return web.name
}

// versionAtLeast reports whether the dotted version v is at least min.
func versionAtLeast(t *testing.T, v, minimum string) bool {
	t.Helper()
	a, b := strings.Split(v, "."), strings.Split(minimum, ".")
	for i := range max(len(a), len(b)) {
		var x, y int
		var err error
		if i < len(a) {
			x, err = strconv.Atoi(a[i])
			require.NoErrorf(t, err, "version %q", v)
		}
		if i < len(b) {
			y, err = strconv.Atoi(b[i])
			require.NoErrorf(t, err, "version %q", minimum)
		}
		if x != y {
			return x > y
		}
	}
	return true
}

// TestDockerIgnore: the build context keeps what the console's image builds
// from (the web sources and the generated client's sources) and leaves out
// installed packages and built output.
func TestDockerIgnore(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	require.NoError(t, err)
	var patterns []string
	for line := range strings.Lines(string(raw)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		require.Falsef(t, strings.HasPrefix(line, "!"), "exceptions (%s) are not understood by this test", line)
		patterns = append(patterns, strings.TrimSuffix(line, "/"))
	}
	ignored := func(path string) bool {
		parts := strings.Split(path, "/")
		for _, p := range patterns {
			pp := strings.Split(p, "/")
			// A pattern excludes a path when it matches the path or one of
			// its parent directories; ** matches any number of directories.
			for n := 1; n <= len(parts); n++ {
				if globMatch(t, pp, parts[:n]) {
					return true
				}
			}
		}
		return false
	}
	for _, path := range []string{
		"go.mod", "gen/go.mod", "libs/server/server.go", "services/registry/cmd/registry/main.go",
		"services/console/web/package.json", "services/console/web/package-lock.json", "services/console/web/src/main.tsx",
		"services/console/web/vite.config.ts", "gen/ts/src/cronmesh/registry/v1/job_service_pb.ts",
	} {
		require.Falsef(t, ignored(path), "%s is left out of the build context", path)
	}
	for _, path := range []string{"services/console/web/node_modules/vite/package.json", "gen/ts/node_modules/x", "bin/registry", ".git/HEAD"} {
		require.Truef(t, ignored(path), "%s is sent in the build context", path)
	}
}

func globMatch(t *testing.T, pattern, parts []string) bool {
	t.Helper()
	if len(pattern) == 0 {
		return len(parts) == 0
	}
	if pattern[0] == "**" {
		for i := 0; i <= len(parts); i++ {
			if globMatch(t, pattern[1:], parts[i:]) {
				return true
			}
		}
		return false
	}
	if len(parts) == 0 {
		return false
	}
	ok, err := filepath.Match(pattern[0], parts[0])
	require.NoError(t, err)
	return ok && globMatch(t, pattern[1:], parts[1:])
}
