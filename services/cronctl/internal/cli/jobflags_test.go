package cli

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

func TestSecretHeaderFlag(t *testing.T) {
	t.Parallel()
	var f jobFlags
	fs := flag.NewFlagSet("update", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs)
	require.NoError(t, fs.Parse([]string{"--header", "X-Plain=p", "--secret-header", "X-Token=tok"}))
	job := &registryv1.Job{}
	paths, err := f.apply(job)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"target.http.headers", "target.http.secret_headers"}, paths)
	require.Equal(t, map[string]string{"X-Plain": "p"}, job.GetTarget().GetHttp().GetHeaders())
	require.Equal(t, map[string]string{"X-Token": "tok"}, job.GetTarget().GetHttp().GetSecretHeaders())
}
