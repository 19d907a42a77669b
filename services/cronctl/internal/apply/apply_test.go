package apply

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

func TestParse(t *testing.T) {
	t.Parallel()
	specs, err := Parse("jobs.yaml", []byte(`
displayName: one
schedule: {cron: "* * * * *"}
paused: false
etag: ignored
---
- display_name: two
  id: 0190f1e2-0000-7000-8000-000000000000
- displayName: three
---
`))
	require.NoError(t, err)
	require.Len(t, specs, 3)
	require.Equal(t, "jobs.yaml#1", specs[0].Source)
	require.Equal(t, "* * * * *", specs[0].Job.GetSchedule().GetCron())
	require.Empty(t, specs[0].Job.GetEtag(), "output-only fields are dropped")
	var names []string
	for _, fd := range specs[0].Fields {
		names = append(names, string(fd.Name()))
	}
	require.Equal(t, []string{"display_name", "schedule", "paused"}, names, "a declared false is a field too")
	require.Equal(t, "id 0190f1e2-0000-7000-8000-000000000000", specs[1].Key())
	require.Equal(t, "name three", specs[2].Key())
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := map[string]struct{ doc, want string }{
		"unknown field":  {"displayName: a\nscheduel: {}\n", "scheduel"},
		"no name":        {"description: x\n", "needs a displayName"},
		"duplicate name": {"- displayName: a\n- displayName: a\n", "declare the same job"},
		"empty":          {"---\n", "no jobs"},
		"not a mapping":  {"- 3\n", "mapping"},
		"bad duration":   {"displayName: a\ncatchUpWindow: soon\n", "Duration"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("f.yaml", []byte(tc.doc))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// stored is a job as the registry returns it: the declared values plus the
// defaults it filled in.
func stored() *registryv1.Job {
	return &registryv1.Job{
		Id: "id-1", DisplayName: "report", Etag: "e1", Version: 1,
		Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "0 6 * * *"}, TimeZone: "UTC"},
		Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Method: "POST", Url: "https://hooks.example.invalid/r", Timeout: durationpb.New(30e9),
			SecretHeaders: map[string]string{"Authorization": ""}, // as read back: names only
		}}},
		CatchUpWindow: durationpb.New(3600e9),
		Priority:      registryv1.Priority_PRIORITY_NORMAL,
	}
}

func TestPlan(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		doc     string
		action  Action
		mask    []string
		diffHas []string
	}{
		{"defaults are no difference", "displayName: report\nschedule: {cron: '0 6 * * *'}\ntarget: {http: {url: 'https://hooks.example.invalid/r'}}\n", Unchanged, nil, nil},
		{"the signing secret is not compared", "displayName: report\ntarget: {http: {url: 'https://hooks.example.invalid/r', signingSecret: whsec_x}}\n", Unchanged, nil, nil},
		{"a credential header is a secret header, compared by name", "displayName: report\ntarget: {http: {url: 'https://hooks.example.invalid/r', headers: {Authorization: 'Bearer t'}}}\n", Unchanged, nil, nil},
		{"secret headers compare by name", "displayName: report\ntarget: {http: {url: 'https://hooks.example.invalid/r', secretHeaders: {Authorization: 'Bearer t'}}}\n", Unchanged, nil, nil},
		{"a new secret header", "displayName: report\ntarget: {http: {url: 'https://hooks.example.invalid/r', secretHeaders: {Authorization: 'a', X-Token: 'b'}}}\n", Update, []string{"target"}, nil},
		{"one changed leaf", "displayName: report\nschedule: {cron: '0 7 * * *'}\n", Update, []string{"schedule"}, []string{"-   cron: 0 6 * * *\n", "+   cron: 0 7 * * *\n"}},
		{"a declared false", "displayName: report\npaused: true\n", Update, []string{"paused"}, []string{"+ paused: true\n"}},
		{"a oneof switch", "displayName: report\nschedule: {interval: {every: 60s}}\n", Update, []string{"schedule"}, []string{"-   cron: 0 6 * * *\n", "+   interval:\n"}},
		{"labels compare whole", "displayName: report\nlabels: {a: b}\n", Update, []string{"labels"}, []string{"+   a: b\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			specs, err := Parse("f.yaml", []byte(tc.doc))
			require.NoError(t, err)
			c := plan(specs[0], stored())
			require.Equal(t, tc.action, c.Action, c.Diff)
			require.Equal(t, tc.mask, c.Mask)
			for _, want := range tc.diffHas {
				require.Contains(t, c.Diff, want)
			}
		})
	}

	specs, err := Parse("f.yaml", []byte("displayName: new\nschedule: {cron: '* * * * *'}\n"))
	require.NoError(t, err)
	c := plan(specs[0], nil)
	require.Equal(t, Create, c.Action)
	require.Equal(t, "+ displayName: new\n+ schedule:\n+   cron: '* * * * *'\n", c.Diff)
}

func TestUnified(t *testing.T) {
	t.Parallel()
	require.Equal(t, "  a\n- b\n+ c\n  d\n", unified("a\nb\nd\n", "a\nc\nd\n"))
	require.Equal(t, "+ a\n", unified("", "a\n"))
	require.Equal(t, "- a\n", unified("a\n", ""))
}

func TestParseBodyTemplate(t *testing.T) {
	t.Parallel()
	specs, err := Parse("jobs.yaml", []byte(`
displayName: nightly
target:
  http:
    url: https://a.example/hook
    bodyFormat: BODY_FORMAT_TEMPLATE
    body: '{"slot":"{{nominal_time}}","attempt":{{attempt}}}'
---
displayName: events
target:
  amqp: {exchange: alpha.x, routing_key: k, body: "{{execution_id}}", body_format: BODY_FORMAT_TEMPLATE}
`))
	require.NoError(t, err)
	require.Equal(t, registryv1.BodyFormat_BODY_FORMAT_TEMPLATE, specs[0].Job.GetTarget().GetHttp().GetBodyFormat())
	require.Equal(t, `{"slot":"{{nominal_time}}","attempt":{{attempt}}}`, specs[0].Job.GetTarget().GetHttp().GetBody())
	require.Equal(t, registryv1.BodyFormat_BODY_FORMAT_TEMPLATE, specs[1].Job.GetTarget().GetAmqp().GetBodyFormat())
}

// TestParseOverlapPolicy: apply -f carries the overlap policy, by its
// enum name.
func TestParseOverlapPolicy(t *testing.T) {
	t.Parallel()
	specs, err := Parse("job.yaml", []byte(`
displayName: nightly
overlapPolicy: OVERLAP_POLICY_BUFFER_ONE
`))
	require.NoError(t, err)
	require.Len(t, specs, 1)
	require.Equal(t, registryv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE, specs[0].Job.GetOverlapPolicy())
	var names []string
	for _, fd := range specs[0].Fields {
		names = append(names, string(fd.Name()))
	}
	require.Equal(t, []string{"display_name", "overlap_policy"}, names)
}

// TestParseDeadline: apply -f carries the execution deadline fields.
func TestParseDeadline(t *testing.T) {
	t.Parallel()
	specs, err := Parse("job.yaml", []byte(`
displayName: nightly
executionDeadline: 5400s
stopRetriesAtNextSlot: true
`))
	require.NoError(t, err)
	require.Len(t, specs, 1)
	require.Equal(t, durationpb.New(5400e9).AsDuration(), specs[0].Job.GetExecutionDeadline().AsDuration())
	require.True(t, specs[0].Job.GetStopRetriesAtNextSlot())
	var names []string
	for _, fd := range specs[0].Fields {
		names = append(names, string(fd.Name()))
	}
	require.Equal(t, []string{"display_name", "execution_deadline", "stop_retries_at_next_slot"}, names)
}

// TestParsePauseOnFailure: apply -f carries pause_after_dead_letters, and
// compares and updates it (it is one of the fields a file names); the
// output-only pause fields of a job printed by `jobs get -o yaml` are
// ignored, so such a file applies as is.
func TestParsePauseOnFailure(t *testing.T) {
	t.Parallel()
	specs, err := Parse("job.yaml", []byte(`
displayName: nightly
pauseAfterDeadLetters: 3
pauseReason: upstream outage
pauseTime: "2026-11-20T03:00:00Z"
pausedByKeyId: k_0123
`))
	require.NoError(t, err)
	require.Len(t, specs, 1)
	require.EqualValues(t, 3, specs[0].Job.GetPauseAfterDeadLetters())
	require.Empty(t, specs[0].Job.GetPauseReason(), "output only")
	var names []string
	for _, fd := range specs[0].Fields {
		names = append(names, string(fd.Name()))
	}
	require.Equal(t, []string{"display_name", "pause_after_dead_letters"}, names)
}

// TestParseMaxRuns: apply -f carries max_runs, as a number or a string
// (proto JSON's int64), and compares it like any updatable field.
func TestParseMaxRuns(t *testing.T) {
	t.Parallel()
	specs, err := Parse("job.yaml", []byte(`
displayName: five times
maxRuns: 5
---
displayName: unlimited again
maxRuns: "0"
`))
	require.NoError(t, err)
	require.Len(t, specs, 2)
	require.EqualValues(t, 5, specs[0].Job.GetMaxRuns())
	var names []string
	for _, fd := range specs[0].Fields {
		names = append(names, string(fd.Name()))
	}
	require.Equal(t, []string{"display_name", "max_runs"}, names)
	require.Zero(t, specs[1].Job.GetMaxRuns())
	require.Len(t, specs[1].Fields, 2, "a limit of 0 written in the file is compared too")
}
