package cli

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

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

func TestBodyTemplateFlag(t *testing.T) {
	t.Parallel()
	parse := func(args ...string) (*registryv1.Job, []string, error) {
		var f jobFlags
		fs := flag.NewFlagSet("create", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.register(fs)
		require.NoError(t, fs.Parse(args))
		job := &registryv1.Job{}
		paths, err := f.apply(job)
		return job, paths, err
	}
	job, paths, err := parse("--url", "https://a.example", "--body-template", `{"slot":"{{nominal_time}}"}`)
	require.NoError(t, err)
	require.Equal(t, `{"slot":"{{nominal_time}}"}`, job.GetTarget().GetHttp().GetBody())
	require.Equal(t, registryv1.BodyFormat_BODY_FORMAT_TEMPLATE, job.GetTarget().GetHttp().GetBodyFormat())
	require.ElementsMatch(t, []string{"target.http.url", "target.http.body", "target.http.body_format"}, paths)

	job, paths, err = parse("--body", `{"a":"{{x}}"}`)
	require.NoError(t, err)
	require.Equal(t, registryv1.BodyFormat_BODY_FORMAT_LITERAL, job.GetTarget().GetHttp().GetBodyFormat(), "--body on a templated job makes it literal")
	require.ElementsMatch(t, []string{"target.http.body", "target.http.body_format"}, paths)

	job, _, err = parse("--amqp-exchange", "alpha.x", "--amqp-routing-key", "k", "--body-template", "{{attempt}}")
	require.NoError(t, err)
	require.Equal(t, registryv1.BodyFormat_BODY_FORMAT_TEMPLATE, job.GetTarget().GetAmqp().GetBodyFormat())

	_, _, err = parse("--body", "a", "--body-template", "b")
	require.ErrorContains(t, err, "not both")
}

func TestDeadlineFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args      []string
		wantPaths []string
		deadline  time.Duration
		stop      bool
	}{
		{"none", nil, nil, 0, false},
		{"deadline", []string{"--execution-deadline", "90m"}, []string{"execution_deadline"}, 90 * time.Minute, false},
		{"stop at next slot", []string{"--stop-retries-at-next-slot"}, []string{"stop_retries_at_next_slot"}, 0, true},
		{"turned off", []string{"--stop-retries-at-next-slot=false"}, []string{"stop_retries_at_next_slot"}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var f jobFlags
			fs := flag.NewFlagSet("update", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f.register(fs)
			require.NoError(t, fs.Parse(tt.args))
			job := &registryv1.Job{StopRetriesAtNextSlot: !tt.stop && len(tt.args) == 0}
			paths, err := f.apply(job)
			require.NoError(t, err)
			require.Equal(t, tt.wantPaths, paths)
			require.Equal(t, tt.deadline, job.GetExecutionDeadline().AsDuration())
			if len(tt.args) > 0 {
				require.Equal(t, tt.stop, job.StopRetriesAtNextSlot)
			}
		})
	}
}

// TestOverlapPolicyFlag: --overlap-policy sets the field and its mask path;
// a wrong value is a usage error naming the choices.
func TestOverlapPolicyFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		value string
		want  registryv1.OverlapPolicy
		ok    bool
	}{
		{"allow", registryv1.OverlapPolicy_OVERLAP_POLICY_ALLOW, true},
		{"skip", registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP, true},
		{"buffer-one", registryv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE, true},
		{"CANCEL_OTHER", registryv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_OTHER, true},
		{"unspecified", 0, false},
		{"forbid", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			t.Parallel()
			var f jobFlags
			fs := flag.NewFlagSet("update", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f.register(fs)
			require.NoError(t, fs.Parse([]string{"--overlap-policy", tt.value}))
			job := &registryv1.Job{}
			paths, err := f.apply(job)
			if !tt.ok {
				require.ErrorContains(t, err, "want allow, skip, buffer-one or cancel-other")
				return
			}
			require.NoError(t, err)
			require.Equal(t, []string{"overlap_policy"}, paths)
			require.Equal(t, tt.want, job.OverlapPolicy)
			require.Equal(t, strings.ReplaceAll(strings.ToLower(tt.value), "_", "-"), overlapPolicyText(job.OverlapPolicy))
		})
	}
}

// TestMaxRunsFlag: --max-runs sets max_runs and names it in the mask, 0
// included (an update back to unlimited); without it nothing changes.
func TestMaxRunsFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  []string
		paths []string
		want  int64
	}{
		{"not given", nil, nil, 7},
		{"a limit", []string{"--max-runs", "3"}, []string{"max_runs"}, 3},
		{"back to unlimited", []string{"--max-runs", "0"}, []string{"max_runs"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var f jobFlags
			fs := flag.NewFlagSet("update", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f.register(fs)
			require.NoError(t, fs.Parse(tt.args))
			job := &registryv1.Job{MaxRuns: 7}
			paths, err := f.apply(job)
			require.NoError(t, err)
			require.Equal(t, tt.paths, paths)
			require.Equal(t, tt.want, job.MaxRuns)
		})
	}
	var f jobFlags
	fs := flag.NewFlagSet("create", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs)
	require.Error(t, fs.Parse([]string{"--max-runs", "three"}))
}
