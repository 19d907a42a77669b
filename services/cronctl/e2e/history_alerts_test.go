package e2e_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/webhooksign"
	"github.com/cronmesh/cronmesh/services/cronctl/internal/cli"
)

// target is an httptest server that answers every request with status and
// counts them.
type target struct {
	*httptest.Server
	mu       sync.Mutex
	requests int
}

func newTarget(t *testing.T, status int) *target {
	t.Helper()
	tg := &target{}
	tg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		tg.mu.Lock()
		tg.requests++
		tg.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(tg.Close)
	return tg
}

func (tg *target) count() int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.requests
}

type executionJSON struct {
	ExecutionID string `json:"executionId"`
	JobID       string `json:"jobId"`
	Status      string `json:"status"`
	Attempt     int    `json:"attempt"`
	TraceID     string `json:"traceId"`
	TraceURL    string `json:"traceUrl"`
}

type executionsJSON struct {
	Items []executionJSON `json:"items"`
}

var traceIDRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// testHistory: a job whose target is an httptest server fires on its
// schedule, and `history list/get/stats` show the execution, its attempt
// and its trace link.
func testHistory(t *testing.T, s *stack) {
	const ns = "history"
	tg := newTarget(t, http.StatusOK)
	job := decode[jobJSON](t, s.ok(t, ns, "jobs", "create", "--name", "fires", "--after", "1s", "--url", tg.URL+"/hook", "-o", "json"))
	require.Eventually(t, func() bool { return tg.count() >= 1 }, 60*time.Second, 100*time.Millisecond, "the job never reached its target")

	var list executionsJSON
	require.Eventually(t, func() bool {
		list = decode[executionsJSON](t, s.ok(t, ns, "history", "list", "--job", job.ID, "-o", "json"))
		return len(list.Items) == 1 && list.Items[0].Status == "EXECUTION_STATUS_SUCCEEDED"
	}, 30*time.Second, 100*time.Millisecond, "the history never showed the execution succeeded: %+v", list)
	e := list.Items[0]
	require.Equal(t, job.ID, e.JobID)
	require.Equal(t, 1, e.Attempt)
	require.Regexp(t, traceIDRE, e.TraceID)
	wantURL := strings.ReplaceAll(traceLinkTemplate, "{trace_id}", e.TraceID)
	require.Equal(t, wantURL, e.TraceURL)

	table := s.ok(t, ns, "history", "list", "--job", job.ID)
	require.Regexp(t, `^ID\s+JOB\s+NAME\s+NOMINAL TIME\s+STATUS\s+ATTEMPT\s+DURATION\s+HTTP\s+REASON\n`, table)
	require.Regexp(t, `(?m)^`+e.ExecutionID+`\s+`+job.ID+`\s+fires\s+\S+\s+succeeded\s+1\s+\S+\s+200\s+-$`, table)
	require.Empty(t, decode[executionsJSON](t, s.ok(t, ns, "history", "list", "--job", job.ID, "--status", "failed,dead", "-o", "json")).Items)
	require.Len(t, decode[executionsJSON](t, s.ok(t, ns, "history", "list", "--status", "succeeded", "--since", "1h", "--trigger", "scheduled,catch-up", "-o", "json")).Items, 1)

	got := decode[struct {
		Execution executionJSON `json:"execution"`
		Attempts  []struct {
			Attempt        int    `json:"attempt"`
			Status         string `json:"status"`
			ResponseStatus int    `json:"responseStatus"`
		} `json:"attempts"`
	}](t, s.ok(t, ns, "history", "get", e.ExecutionID, "-o", "json"))
	require.Equal(t, wantURL, got.Execution.TraceURL)
	require.Len(t, got.Attempts, 1)
	require.Equal(t, "EXECUTION_STATUS_SUCCEEDED", got.Attempts[0].Status)
	require.Equal(t, 200, got.Attempts[0].ResponseStatus)
	table = s.ok(t, ns, "history", "get", e.ExecutionID)
	require.Regexp(t, `(?m)^status:\s+succeeded$`, table)
	require.Regexp(t, `(?m)^trace id:\s+`+e.TraceID+`$`, table)
	require.Regexp(t, `(?m)^trace:\s+`+regexp.QuoteMeta(wantURL)+`$`, table)
	require.Regexp(t, `(?m)^1\s+succeeded\s+\S+\s+\S+\s+200\s+-\s+-$`, table, "the attempts table")

	stats := decode[struct {
		Runs      string        `json:"runs"`
		Successes string        `json:"successes"`
		LastRun   executionJSON `json:"lastRun"`
	}](t, s.ok(t, ns, "history", "stats", job.ID, "-o", "json"))
	require.Equal(t, "1", stats.Runs)
	require.Equal(t, "1", stats.Successes)
	require.Equal(t, wantURL, stats.LastRun.TraceURL)
	table = s.ok(t, ns, "history", "stats", job.ID)
	require.Regexp(t, `(?m)^runs:\s+1$`, table)
	require.Regexp(t, `(?m)^success rate:\s+100.0%$`, table)
	require.Regexp(t, `(?m)^last trace:\s+`+regexp.QuoteMeta(wantURL)+`$`, table)

	r := s.cronctl(t, ns, nil, "history", "get", "0190f1e2-0000-7000-8000-000000000000")
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "error: not_found:")
	r = s.cronctl(t, ns, nil, "history", "list", "--query", "ab")
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "error: invalid_argument:")
	require.Regexp(t, `(?m)^  query: `, r.stderr)

	// `rerun` runs the finished execution's job once more, to another
	// path with another body, and the history says so.
	rerun := decode[map[string]string](t, s.ok(t, ns, "rerun", e.ExecutionID, "--target-url", tg.URL+"/again", "--body", `{"again":true}`, "-o", "json"))
	require.Equal(t, job.ID, rerun["jobId"])
	require.NotEqual(t, e.ExecutionID, rerun["executionId"])
	type rerunJSON struct {
		Execution struct {
			Status     string   `json:"status"`
			RerunOf    string   `json:"rerunOfExecutionId"`
			Overridden []string `json:"overriddenFields"`
		} `json:"execution"`
	}
	var again rerunJSON
	require.Eventually(t, func() bool {
		r := s.cronctl(t, ns, nil, "history", "get", rerun["executionId"], "-o", "json")
		if r.code != cli.ExitOK {
			return false
		}
		again = decode[rerunJSON](t, r.stdout)
		return again.Execution.Status == "EXECUTION_STATUS_SUCCEEDED"
	}, 30*time.Second, 100*time.Millisecond, "the re-run never succeeded in the history")
	require.Equal(t, e.ExecutionID, again.Execution.RerunOf)
	require.Equal(t, []string{"target", "body"}, again.Execution.Overridden)
	table = s.ok(t, ns, "history", "get", rerun["executionId"])
	require.Regexp(t, `(?m)^re-run of:\s+`+e.ExecutionID+`$`, table)
	require.Regexp(t, `(?m)^overridden:\s+target, body$`, table)
	require.Equal(t, 2, tg.count(), "the re-run reached the target once")
	r = s.cronctl(t, ns, nil, "rerun", "0190f1e2-0000-7000-8000-000000000000")
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "error: not_found:")
}

// notification is what a webhook channel received, signature verified.
type notification struct {
	Type     string `json:"type"`
	Incident *struct {
		ID    string `json:"id"`
		JobID string `json:"job_id"`
		Kind  string `json:"kind"`
	} `json:"incident"`
}

// receiver is a webhook channel's endpoint: it verifies each notification's
// Standard Webhooks signature with the channel's secret and records it.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	received []notification
	bad      []string
}

func newReceiver(t *testing.T, secret string) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if err := webhooksign.Verify(secret, r.Header, body, 5*time.Minute, time.Now()); err != nil {
			rc.bad = append(rc.bad, err.Error())
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var n notification
		if err := json.Unmarshal(body, &n); err != nil {
			rc.bad = append(rc.bad, err.Error())
		}
		rc.received = append(rc.received, n)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) notifications() ([]notification, []string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]notification(nil), rc.received...), append([]string(nil), rc.bad...)
}

func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

type channelJSON struct {
	ID      string `json:"id"`
	Webhook *struct {
		URL              string `json:"url"`
		SigningSecret    string `json:"signingSecret"`
		HasSigningSecret bool   `json:"hasSigningSecret"`
	} `json:"webhook"`
	Email *struct {
		Password    string `json:"password"`
		HasPassword bool   `json:"hasPassword"`
	} `json:"email"`
}

type incidentJSON struct {
	ID     string `json:"id"`
	RuleID string `json:"ruleId"`
	JobID  string `json:"jobId"`
	State  string `json:"state"`
	Kind   string `json:"kind"`
}

// testAlerts: channels (webhook and email, secrets never printed), rules,
// and an always-500 job that dead-letters, opens an incident of a
// consecutive-failures rule and notifies its webhook channel.
func testAlerts(t *testing.T, s *stack) {
	const ns = "alerts"
	dir := t.TempDir()
	secret := newSecret(t)
	s.addSecret(secret)
	secretFile := filepath.Join(dir, "hook-secret")
	require.NoError(t, os.WriteFile(secretFile, []byte(secret+"\n"), 0o600))
	rc := newReceiver(t, secret)

	// Channels.
	ch := decode[channelJSON](t, s.ok(t, ns, "alerts", "channels", "create", "--name", "ops-hook", "--webhook-url", rc.URL+"/alerts", "--secret-file", secretFile, "-o", "json"))
	require.NotEmpty(t, ch.ID)
	require.NotNil(t, ch.Webhook)
	require.True(t, ch.Webhook.HasSigningSecret)
	require.Empty(t, ch.Webhook.SigningSecret)
	test := s.ok(t, ns, "alerts", "channels", "test", ch.ID)
	require.Regexp(t, `(?m)^delivered:\s+true$`, test)
	got, bad := rc.notifications()
	require.Empty(t, bad, "every notification is signed with the channel's secret")
	require.Len(t, got, 1)
	require.Equal(t, "channel.test", got[0].Type)

	const smtpPassword = "smtp-Pa55word-e2e-do-not-print"
	s.addSecret(smtpPassword)
	r := s.cronctl(t, ns, map[string]string{"SMTP_PASSWORD": smtpPassword}, "alerts", "channels", "create", "--name", "ops-mail",
		"--smtp-host", "127.0.0.1", "--smtp-port", "2525", "--smtp-security", "none", "--smtp-username", "cron",
		"--from", "cron@example.invalid", "--to", "ops@example.invalid", "--secret-env", "SMTP_PASSWORD", "-o", "yaml")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "hasPassword: true")
	mailID := regexp.MustCompile(`(?m)^id: (\S+)$`).FindStringSubmatch(r.stdout)
	require.NotNil(t, mailID, r.stdout)
	table := s.ok(t, ns, "alerts", "channels", "get", mailID[1])
	require.Regexp(t, `(?m)^password:\s+set \(never shown\)$`, table)
	require.Regexp(t, `(?m)^smtp:\s+127.0.0.1:2525 \(none\)$`, table)
	table = s.ok(t, ns, "alerts", "channels", "list")
	require.Regexp(t, `(?m)^ID\s+NAME\s+KIND\s+DESTINATION\s+SECRET$`, table)
	require.Regexp(t, `(?m)^`+ch.ID+`\s+ops-hook\s+webhook\s+`+regexp.QuoteMeta(rc.URL)+`/alerts\s+set \(never shown\)$`, table)
	require.Regexp(t, `(?m)^`+mailID[1]+`\s+ops-mail\s+email\s+ops@example.invalid\s+set \(never shown\)$`, table)
	// An update that gives no secret keeps it.
	s.ok(t, ns, "alerts", "channels", "update", mailID[1], "--name", "ops-mail-2", "--to", "oncall@example.invalid")
	table = s.ok(t, ns, "alerts", "channels", "get", mailID[1])
	require.Regexp(t, `(?m)^name:\s+ops-mail-2$`, table)
	require.Regexp(t, `(?m)^to:\s+oncall@example.invalid$`, table)
	require.Regexp(t, `(?m)^password:\s+set \(never shown\)$`, table)
	require.Regexp(t, `(?m)^deleted:`, s.ok(t, ns, "alerts", "channels", "delete", mailID[1]))

	// A job that always fails, at most one retry, and a rule on it.
	fail := newTarget(t, http.StatusInternalServerError)
	jobFile := filepath.Join(dir, "job.yaml")
	require.NoError(t, os.WriteFile(jobFile, []byte("displayName: always-500\nretryPolicy: {maxRetries: 1, initialBackoff: 1s}\n"), 0o600))
	job := decode[jobJSON](t, s.ok(t, ns, "jobs", "create", "-f", jobFile, "--cron", "0 0 1 1 *", "--url", fail.URL, "-o", "json"))
	rule := decode[struct {
		ID string `json:"id"`
	}](t, s.ok(t, ns, "alerts", "rules", "create", "--name", "first-failure", "--consecutive-failures", "1", "--job", job.ID, "--channel", ch.ID, "-o", "json"))
	require.NotEmpty(t, rule.ID)
	table = s.ok(t, ns, "alerts", "rules", "get", rule.ID)
	require.Regexp(t, `(?m)^condition:\s+1 consecutive failures$`, table)
	require.Regexp(t, `(?m)^jobs:\s+`+job.ID+`$`, table)
	require.Regexp(t, `(?m)^`+rule.ID+`\s+first-failure\s+1 consecutive failures\s+`+job.ID+`\s+1\s+false$`, s.ok(t, ns, "alerts", "rules", "list"))
	r = s.cronctl(t, ns, nil, "alerts", "channels", "delete", ch.ID)
	require.Equal(t, cli.ExitError, r.code, "a channel a rule names cannot go")
	require.Contains(t, r.stderr, "error: failed_precondition:")

	s.ok(t, ns, "jobs", "run", job.ID)
	require.Eventually(t, func() bool {
		return len(decode[map[string][]any](t, s.ok(t, ns, "deadletters", "list", "--job", job.ID, "-o", "json"))["items"]) == 1
	}, 60*time.Second, 200*time.Millisecond, "the job never dead-lettered")
	require.Equal(t, 2, fail.count(), "one attempt and one retry")

	var incidents struct {
		Items []incidentJSON `json:"items"`
	}
	require.Eventually(t, func() bool {
		incidents = decode[struct {
			Items []incidentJSON `json:"items"`
		}](t, s.ok(t, ns, "alerts", "incidents", "list", "-o", "json"))
		return len(incidents.Items) == 1
	}, 30*time.Second, 200*time.Millisecond, "no incident opened")
	inc := incidents.Items[0]
	require.Equal(t, "INCIDENT_STATE_OPEN", inc.State)
	require.Equal(t, "INCIDENT_KIND_CONSECUTIVE_FAILURES", inc.Kind)
	require.Equal(t, job.ID, inc.JobID)
	require.Equal(t, rule.ID, inc.RuleID)
	table = s.ok(t, ns, "alerts", "incidents", "list", "--state", "open", "--job", job.ID)
	require.Regexp(t, `(?m)^`+inc.ID+`\s+open\s+consecutive-failures\s+`+job.ID+`(?: \(always-500\))?\s+`+rule.ID+`\s+\S+\s+-\s+.+$`, table)

	require.Eventually(t, func() bool {
		got, _ := rc.notifications()
		for _, n := range got {
			if n.Type == "incident.opened" && n.Incident != nil && n.Incident.ID == inc.ID {
				return true
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "the webhook channel never received the incident")
	_, bad = rc.notifications()
	require.Empty(t, bad)

	// The history has it too: dead after two attempts of HTTP 500. It
	// ingests the DEAD event on its own, so it may show it a moment after
	// the dead-letter store and alerting do.
	var dead executionsJSON
	require.Eventually(t, func() bool {
		dead = decode[executionsJSON](t, s.ok(t, ns, "history", "list", "--job", job.ID, "--status", "dead", "-o", "json"))
		return len(dead.Items) == 1
	}, 30*time.Second, 200*time.Millisecond, "the history never showed the execution dead")
	require.Equal(t, 2, dead.Items[0].Attempt)
	table = s.ok(t, ns, "history", "get", dead.Items[0].ExecutionID)
	require.Regexp(t, `(?m)^1\s+retrying\s+\S+\s+\S+\s+500\s+\d\S*s\s+.+$`, table, "attempt 1 failed, retry scheduled")
	require.Regexp(t, `(?m)^2\s+dead\s+\S+\s+\S+\s+500\s+-\s+.+$`, table)

	// Acknowledge: still open, now acknowledged; twice is fine.
	table = s.ok(t, ns, "alerts", "incidents", "ack", inc.ID)
	require.Regexp(t, `(?m)^state:\s+acknowledged$`, table)
	require.Regexp(t, `(?m)^acknowledged:\s+\d{4}-`, table)
	s.ok(t, ns, "alerts", "incidents", "ack", inc.ID)
	table = s.ok(t, ns, "alerts", "incidents", "get", inc.ID)
	require.Regexp(t, `(?m)^kind:\s+consecutive-failures$`, table)
	require.Len(t, decode[struct {
		Items []incidentJSON `json:"items"`
	}](t, s.ok(t, ns, "alerts", "incidents", "list", "--state", "acknowledged", "-o", "json")).Items, 1)
	require.Empty(t, decode[struct {
		Items []incidentJSON `json:"items"`
	}](t, s.ok(t, ns, "alerts", "incidents", "list", "--state", "resolved", "-o", "json")).Items)

	// Update keeps what is not given; delete resolves and removes.
	table = s.ok(t, ns, "alerts", "rules", "update", rule.ID, "--disabled")
	require.Regexp(t, `(?m)^disabled:\s+true$`, table)
	require.Regexp(t, `(?m)^condition:\s+1 consecutive failures$`, table)
	require.Regexp(t, `(?m)^channels:\s+`+ch.ID+`$`, table)
	s.ok(t, ns, "alerts", "rules", "delete", rule.ID)
	r = s.cronctl(t, ns, nil, "alerts", "rules", "get", rule.ID)
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "error: not_found:")
	s.ok(t, ns, "alerts", "channels", "delete", ch.ID)

	r = s.cronctl(t, ns, nil, "alerts", "rules", "create", "--name", "nothing")
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "error: invalid_argument:")
}
