package e2e_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/services/cronctl/internal/cli"
)

// TestCLI runs every command against one real stack; each subtest has its
// own namespace. At the end no API key and no channel secret may appear in
// anything printed.
func TestCLI(t *testing.T) {
	s := startStack(t)
	t.Run("commands", func(t *testing.T) {
		t.Run("jobs", func(t *testing.T) { t.Parallel(); testJobs(t, s) })
		t.Run("etag", func(t *testing.T) { t.Parallel(); testEtag(t, s) })
		t.Run("apply", func(t *testing.T) { t.Parallel(); testApply(t, s) })
		t.Run("invalid", func(t *testing.T) { t.Parallel(); testInvalid(t, s) })
		t.Run("deadletters", func(t *testing.T) { t.Parallel(); testDeadLetters(t, s) })
		t.Run("ring", func(t *testing.T) { t.Parallel(); testRing(t, s) })
		t.Run("preview", func(t *testing.T) { t.Parallel(); testPreview(t, s) })
		t.Run("config", func(t *testing.T) { t.Parallel(); testConfig(t, s) })
		t.Run("usage", func(t *testing.T) { t.Parallel(); testUsage(t, s) })
		t.Run("history", func(t *testing.T) { t.Parallel(); testHistory(t, s) })
		t.Run("alerts", func(t *testing.T) { t.Parallel(); testAlerts(t, s) })
		t.Run("keys", func(t *testing.T) { t.Parallel(); testKeyManagement(t, s) })
	})
	s.requireNoSecretPrinted(t)
}

type jobJSON struct {
	ID          string `json:"id"`
	DisplayName string `json:"displayName"`
	Etag        string `json:"etag"`
	Version     string `json:"version"`
	Paused      bool   `json:"paused"`
	PauseReason string `json:"pauseReason"`
	PausedByKey string `json:"pausedByKeyId"`
	Description string `json:"description"`
	Schedule    struct {
		Cron string `json:"cron"`
	} `json:"schedule"`
}

type listJSON struct {
	Items         []jobJSON `json:"items"`
	NextPageToken string    `json:"nextPageToken"`
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal([]byte(s), &v), "not JSON: %s", s)
	return v
}

const hook = "https://hooks.example.invalid/cronmesh"

func testJobs(t *testing.T, s *stack) {
	const ns = "jobs"
	created := decode[jobJSON](t, s.ok(t, ns, "jobs", "create", "--name", "nightly", "--cron", "0 2 * * *", "--url", hook, "--label", "team=ops", "-o", "json"))
	require.NotEmpty(t, created.ID)
	require.Equal(t, "nightly", created.DisplayName)

	table := s.ok(t, ns, "jobs", "list")
	require.Regexp(t, `^ID\s+NAME\s+SCHEDULE\s+TARGET\s+PAUSED\s+VERSION\n`, table)
	require.Contains(t, table, created.ID)
	require.Contains(t, table, "cron 0 2 * * *")
	require.Contains(t, table, "POST "+hook)

	list := decode[listJSON](t, s.ok(t, ns, "jobs", "list", "-o", "json", "--label", "team=ops"))
	require.Len(t, list.Items, 1)
	require.Equal(t, created.ID, list.Items[0].ID)
	require.Empty(t, decode[listJSON](t, s.ok(t, ns, "jobs", "list", "-o", "json", "--label", "team=dev")).Items)
	byName := decode[listJSON](t, s.ok(t, ns, "jobs", "list", "-o", "json", "--name", "NIGHT"))
	require.Len(t, byName.Items, 1)
	require.Equal(t, created.ID, byName.Items[0].ID)
	require.Empty(t, decode[listJSON](t, s.ok(t, ns, "jobs", "list", "-o", "json", "--name", "weekly")).Items)

	got := s.ok(t, ns, "jobs", "get", created.ID)
	require.Contains(t, got, "next runs:")
	require.Contains(t, got, "02:00:00Z")
	getResp := decode[struct {
		Job          jobJSON  `json:"job"`
		NextRunTimes []string `json:"nextRunTimes"`
	}](t, s.ok(t, ns, "jobs", "get", created.ID, "-o", "json", "--next", "3"))
	require.Equal(t, created.ID, getResp.Job.ID)
	require.Len(t, getResp.NextRunTimes, 3)

	updated := decode[jobJSON](t, s.ok(t, ns, "jobs", "update", created.ID, "--description", "the nightly report", "--cron", "0 3 * * *", "-o", "json"))
	require.Equal(t, "the nightly report", updated.Description)
	require.Equal(t, "0 3 * * *", updated.Schedule.Cron)
	require.Equal(t, "nightly", updated.DisplayName, "fields not given keep their values")
	require.Equal(t, "2", updated.Version)

	paused := decode[jobJSON](t, s.ok(t, ns, "jobs", "pause", created.ID, "--reason", "upstream outage", "-o", "json"))
	require.True(t, paused.Paused)
	require.Equal(t, "upstream outage", paused.PauseReason)
	require.NotEmpty(t, paused.PausedByKey, "the key that paused, by id")
	require.Regexp(t, `pause reason:\s+upstream outage`, s.ok(t, ns, "jobs", "get", created.ID))
	require.Contains(t, s.ok(t, ns, "jobs", "list", "--paused", "true"), created.ID)
	resumed := decode[jobJSON](t, s.ok(t, ns, "jobs", "resume", created.ID, "-o", "json"))
	require.False(t, resumed.Paused)
	require.Empty(t, resumed.PauseReason, "resume clears the reason")

	run := decode[map[string]string](t, s.ok(t, ns, "jobs", "run", created.ID, "-o", "json"))
	require.NotEmpty(t, run["nominalTime"])
	require.Contains(t, s.ok(t, ns, "jobs", "run", created.ID), "nominal time:")
	overridden := decode[map[string]string](t, s.ok(t, ns, "jobs", "run", created.ID, "--target-url", hook+"/v2", "--body", "{}", "--header", "X-Replay=1", "-o", "json"))
	require.NotEmpty(t, overridden["nominalTime"])
	bad := s.cronctl(t, ns, nil, "jobs", "run", created.ID, "--header", "Host=evil.example.invalid")
	require.Equal(t, cli.ExitError, bad.code)
	require.Contains(t, bad.stderr, `headers_override["Host"]`, "a bad override names its field")

	require.Contains(t, s.ok(t, ns, "jobs", "delete", created.ID), "deleted:")
	r := s.cronctl(t, ns, nil, "jobs", "get", created.ID)
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "error: not_found:")
}

func testEtag(t *testing.T, s *stack) {
	const ns = "etag"
	job := decode[jobJSON](t, s.ok(t, ns, "jobs", "create", "--name", "guarded", "--every", "1m", "--url", hook, "-o", "json"))
	s.ok(t, ns, "jobs", "update", job.ID, "--name", "guarded-2", "--etag", job.Etag)

	r := s.cronctl(t, ns, nil, "jobs", "update", job.ID, "--name", "guarded-3", "--etag", job.Etag)
	require.Equal(t, cli.ExitError, r.code, "a stale etag must fail")
	require.Contains(t, r.stderr, "error: aborted:")

	r = s.cronctl(t, ns, nil, "jobs", "delete", job.ID, "--etag", job.Etag)
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "error: aborted:")
	require.Equal(t, "guarded-2", decode[struct {
		Job jobJSON `json:"job"`
	}](t, s.ok(t, ns, "jobs", "get", job.ID, "-o", "json")).Job.DisplayName)
}

const jobsYAML = `# two jobs, one document each
displayName: report
description: the daily report
labels: {team: data}
schedule:
  cron: "0 6 * * *"
  timeZone: Europe/Berlin
target:
  http:
    url: https://hooks.example.invalid/report
retryPolicy:
  maxRetries: 3
---
- displayName: cleanup
  schedule:
    interval:
      every: 3600s
  target:
    http:
      method: DELETE
      url: https://hooks.example.invalid/cleanup
      timeout: 10s
  priority: PRIORITY_LOW
`

func testApply(t *testing.T, s *stack) {
	const ns = "apply"
	dir := t.TempDir()
	file := filepath.Join(dir, "jobs.yaml")
	require.NoError(t, os.WriteFile(file, []byte(jobsYAML), 0o600))

	r := s.cronctl(t, ns, nil, "apply", "-f", file, "--dry-run")
	require.Equal(t, cli.ExitDiff, r.code, "stderr: %s", r.stderr)
	require.Contains(t, r.stdout, `create "report"`)
	require.Contains(t, r.stdout, `create "cleanup"`)
	require.Contains(t, r.stdout, "+ displayName: report")
	require.Empty(t, decode[listJSON](t, s.ok(t, ns, "jobs", "list", "-o", "json")).Items, "a dry run changes nothing")

	out := s.ok(t, ns, "apply", "-f", file)
	require.Contains(t, out, `created "report"`)
	require.Contains(t, out, `created "cleanup"`)
	before := versions(t, s, ns)
	require.Equal(t, map[string]string{"report": "1", "cleanup": "1"}, before)

	// Applying again changes nothing: the registry's defaults for the fields
	// the file leaves out do not count as differences.
	out = s.ok(t, ns, "apply", "-f", file)
	require.Contains(t, out, `unchanged "report"`)
	require.Contains(t, out, `unchanged "cleanup"`)
	r = s.cronctl(t, ns, nil, "apply", "-f", file, "--dry-run")
	require.Equal(t, cli.ExitOK, r.code, "nothing to do: exit 0\n%s", r.stdout)
	require.Equal(t, before, versions(t, s, ns))

	// One changed field: the dry run shows it and changes nothing; apply
	// updates that job only.
	changed := strings.Replace(jobsYAML, `cron: "0 6 * * *"`, `cron: "30 6 * * *"`, 1)
	require.NoError(t, os.WriteFile(file, []byte(changed), 0o600))
	r = s.cronctl(t, ns, nil, "apply", "-f", file, "--dry-run")
	require.Equal(t, cli.ExitDiff, r.code)
	require.Contains(t, r.stdout, `update "report"`)
	require.Contains(t, r.stdout, "\n    -   cron: 0 6 * * *\n    +   cron: 30 6 * * *\n")
	require.Contains(t, r.stdout, "\n        timeZone: Europe/Berlin\n", "unchanged lines are context")
	require.Contains(t, r.stdout, `unchanged "cleanup"`)
	require.Equal(t, before, versions(t, s, ns))

	out = s.ok(t, ns, "apply", "-f", file, "-o", "json")
	results := decode[struct {
		Items []struct {
			Action        string   `json:"action"`
			Name          string   `json:"name"`
			ChangedFields []string `json:"changedFields"`
		} `json:"items"`
	}](t, out)
	require.Len(t, results.Items, 2)
	require.Equal(t, "updated", results.Items[0].Action)
	require.Equal(t, []string{"schedule"}, results.Items[0].ChangedFields)
	require.Equal(t, "unchanged", results.Items[1].Action)
	require.Equal(t, map[string]string{"report": "2", "cleanup": "1"}, versions(t, s, ns))

	list := decode[listJSON](t, s.ok(t, ns, "jobs", "list", "-o", "json", "--label", "team=data"))
	require.Len(t, list.Items, 1)
	require.Equal(t, "30 6 * * *", list.Items[0].Schedule.Cron)
	require.Contains(t, s.ok(t, ns, "apply", "-f", file), `unchanged "report"`)
}

func versions(t *testing.T, s *stack, ns string) map[string]string {
	t.Helper()
	v := map[string]string{}
	for _, j := range decode[listJSON](t, s.ok(t, ns, "jobs", "list", "-o", "json")).Items {
		v[j.DisplayName] = j.Version
	}
	return v
}

func testInvalid(t *testing.T, s *stack) {
	const ns = "invalid"
	r := s.cronctl(t, ns, nil, "jobs", "create", "--name", "broken", "--cron", "61 * * * *", "--url", hook)
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "error: invalid_argument:")
	require.Regexp(t, `(?m)^  job\.schedule\.cron: `, r.stderr, "each field violation on its own line")

	file := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(file, []byte("displayName: bad\nschedule: {cron: '* * * * *'}\ntarget: {http: {url: 'not a url'}}\n"), 0o600))
	r = s.cronctl(t, ns, nil, "apply", "-f", file)
	require.Equal(t, cli.ExitError, r.code)
	require.Regexp(t, `(?m)^  job\.target\.http\.url: `, r.stderr)
	require.Empty(t, decode[listJSON](t, s.ok(t, ns, "jobs", "list", "-o", "json")).Items)

	require.NoError(t, os.WriteFile(file, []byte("displayName: bad\nscheduel: {cron: '* * * * *'}\n"), 0o600))
	r = s.cronctl(t, ns, nil, "apply", "-f", file)
	require.Equal(t, cli.ExitError, r.code, "an unknown field is refused before any call")
	require.Contains(t, r.stderr, "scheduel")
}

func testDeadLetters(t *testing.T, s *stack) {
	const ns = "dead"
	table := s.ok(t, ns, "deadletters", "list")
	require.Regexp(t, `^ID\s+JOB\s+NOMINAL TIME\s+DEAD TIME\s+ATTEMPT\s+REASON\n$`, table)
	list := decode[map[string][]any](t, s.ok(t, ns, "dead-letters", "list", "-o", "json"))
	require.Contains(t, list, "items")
	require.Empty(t, list["items"])
	r := s.cronctl(t, ns, nil, "deadletters", "purge", "0190f1e2-0000-7000-8000-000000000000")
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "error: ")
}

func testRing(t *testing.T, s *stack) {
	const ns = "ring"
	table := s.ok(t, ns, "ring", "status")
	require.Contains(t, table, "partitions: 8 (0 without an owner)")
	require.Regexp(t, `(?m)^NODE\s+ADDRESS\s+JOINED\s+PARTITIONS$`, table)
	require.Regexp(t, `(?m)^`+triggerNode+`\s+\S+\s+\S+\s+8$`, table)
	ring := decode[struct {
		PartitionCount int `json:"partitionCount"`
		Members        []struct {
			NodeID string `json:"nodeId"`
		} `json:"members"`
	}](t, s.ok(t, ns, "ring", "status", "-o", "json"))
	require.Equal(t, 8, ring.PartitionCount)
	require.Len(t, ring.Members, 1)
	require.Equal(t, triggerNode, ring.Members[0].NodeID)
}

func testPreview(t *testing.T, s *stack) {
	const ns = "preview"
	table := s.ok(t, ns, "jobs", "preview", "--cron", "0 * * * *", "--from", "2030-01-01T00:00:00Z", "--count", "3")
	require.Equal(t, "TIME (UTC)\n2030-01-01T01:00:00Z\n2030-01-01T02:00:00Z\n2030-01-01T03:00:00Z\n", table)
	times := decode[struct {
		Times []string `json:"times"`
	}](t, s.ok(t, ns, "jobs", "preview", "--cron", "0 2 * * *", "--tz", "Europe/Berlin", "--from", "2030-01-01T00:00:00Z", "--count", "1", "-o", "json"))
	require.Equal(t, []string{"2030-01-01T01:00:00Z"}, times.Times)
}

func testConfig(t *testing.T, s *stack) {
	const ns = "secret"
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "cronctl.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte("apiKey: "+keyOf(ns)+"\nregistryUrl: "+s.registry+"\noutput: json\n"), 0o600))
	noEnvKey := map[string]string{"CRONMESH_API_KEY": "", "CRONMESH_REGISTRY_URL": ""}

	// The key from the file works and is never shown.
	r := s.cronctl(t, ns, noEnvKey, "--config", cfgFile, "jobs", "list")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `"items"`, "output: json from the file")

	r = s.cronctl(t, ns, noEnvKey, "config", "view", "--config", cfgFile, "-o", "table")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "<redacted>")
	require.Regexp(t, `apiKey:\s+<redacted>\s+\(file\)`, r.stdout)
	require.Regexp(t, `output:\s+table\s+\(flag\)`, r.stdout, "a flag wins over the file")
	require.Regexp(t, `triggerUrl:\s+\S+\s+\(env\)`, r.stdout)

	// A key on the command line is masked too, also when the call fails
	// and when the server echoes nothing of it.
	r = s.cronctl(t, ns, map[string]string{"CRONMESH_API_KEY": ""}, "jobs", "list", "--api-key", keyOf(ns)+"-wrong", "-o", "json")
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "error: unauthenticated:")
	require.NotContains(t, r.stdout+r.stderr, keyOf(ns))

	r = s.cronctl(t, ns, nil, "config", "view", "-o", "json", "--api-key", keyOf(ns))
	require.Equal(t, cli.ExitOK, r.code)
	view := decode[map[string]string](t, r.stdout)
	require.Equal(t, "<redacted>", view["apiKey"])
	require.Equal(t, s.registry, view["registryUrl"])
}

func testUsage(t *testing.T, s *stack) {
	r := s.cronctl(t, "jobs", nil, "jobs", "frobnicate")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, `unknown command "cronctl jobs frobnicate"`)
	r = s.cronctl(t, "jobs", nil, "jobs", "get")
	require.Equal(t, cli.ExitUsage, r.code)
	r = s.cronctl(t, "jobs", nil, "jobs", "list", "--no-such-flag")
	require.Equal(t, cli.ExitUsage, r.code)
	r = s.cronctl(t, "jobs", nil, "help")
	require.Equal(t, cli.ExitOK, r.code)
	require.Contains(t, r.stdout, "deadletters")
}
