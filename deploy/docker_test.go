package deploy_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
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

			build, final := stages[0], stages[len(stages)-1]
			require.Equal(t, "golang:${GO_VERSION}", build.base, "the builder is the Go image")
			require.Equal(t, string(goVersion[1]), args["GO_VERSION"], "GO_VERSION is go.mod's go directive")
			require.NotEmpty(t, build.name, "the builder stage is named")

			var static, built bool
			for _, in := range build.body {
				if (in.cmd == "ENV" || in.cmd == "RUN") && regexp.MustCompile(`\bCGO_ENABLED=0\b`).MatchString(in.args) {
					static = true
				}
				if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
					require.True(t, static, "CGO_ENABLED=0 is set before go build")
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
