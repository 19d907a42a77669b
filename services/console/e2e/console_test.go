package e2e_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	auditv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/audit/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/audit/v1/auditv1connect"
	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/meshrun"
	"github.com/cronmesh/cronmesh/libs/testkit/freeport"
	"github.com/cronmesh/cronmesh/libs/testkit/meshtest"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
	"github.com/cronmesh/cronmesh/libs/testkit/smtptest"
)

const (
	keyAlpha = "alpha-console-key-0123456789"
	keyBeta  = "beta-console-key-0123456789"
	// bundleBudget is the most gzipped JavaScript the console may ship.
	bundleBudget = 500 << 10
)

// chromium is Debian's Chromium, which `make test` installs when missing.
func chromium() string {
	if p := os.Getenv("CRONMESH_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// consoleDir is services/console, the parent of the package's directory,
// where go test runs the test.
func consoleDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("..")
	require.NoError(t, err)
	return dir
}

// builtAssets is the vite build the console binary embeds; `make build`
// makes it.
func builtAssets(t *testing.T) string {
	t.Helper()
	dist := filepath.Join(consoleDir(t), "internal", "assets", "dist")
	_, err := os.Stat(filepath.Join(dist, "index.html"))
	require.NoError(t, err, "the console's assets are not built: run make build (it runs vite into %s)", dist)
	return dist
}

func TestBundleIsWithinBudget(t *testing.T) {
	t.Parallel()
	scripts, err := filepath.Glob(filepath.Join(builtAssets(t), "assets", "*.js"))
	require.NoError(t, err)
	require.NotEmpty(t, scripts)
	var total int
	for _, s := range scripts {
		raw, err := os.ReadFile(s)
		require.NoError(t, err)
		var buf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		require.NoError(t, err)
		_, err = zw.Write(raw)
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		total += buf.Len()
	}
	t.Logf("gzipped JavaScript: %d KiB in %d files", total>>10, len(scripts))
	assert.Less(t, total, bundleBudget, "the console's gzipped JavaScript is over its budget")
}

// target answers /ok with 200 and /fail with 500, counting the calls.
type target struct {
	ok, fail atomic.Int64
}

func (tg *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/ok":
		tg.ok.Add(1)
		_, _ = io.WriteString(w, `{"ok": true}`)
	case "/fail":
		tg.fail.Add(1)
		http.Error(w, "boom: the target is failing on purpose", http.StatusInternalServerError)
	default:
		_, _ = io.WriteString(w, "hook")
	}
}

// startConsole runs the console (built with the assets of `make build`,
// or taken from it) in front of mesh until the test ends.
func startConsole(t *testing.T, mesh *meshrun.Mesh) string {
	t.Helper()
	builtAssets(t)
	bin := bins.Binary(t, "console", "console/cmd/console")
	addr, err := freeport.Addr()
	require.NoError(t, err)
	logPath := filepath.Join(mesh.LogDir(), "console.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(bin, "--listen", addr, "--log-level", "warn",
		"--registry-url", mesh.Registry.URL, "--trigger-url", mesh.Triggers[0].URL,
		"--dispatcher-url", mesh.Dispatcher.URL, "--history-url", mesh.History.URL, "--alerting-url", mesh.Alerting.URL)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-done:
			assert.NoError(t, err, "the console's exit")
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("the console did not stop within 20 s of SIGINT")
		}
		logFile.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("console log:\n%s", b)
			}
		}
	})
	url := "http://" + addr
	require.Eventually(t, func() bool {
		res, err := http.Get(url + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "the console did not become ready")
	return url
}

func TestConsoleInABrowser(t *testing.T) {
	_, err := os.Stat(chromium())
	require.NoError(t, err, "Chromium is missing: `make test` installs it (apt-get install -y chromium)")
	mesh := meshtest.Start(t, bins, meshtest.Options{
		APIKeys:      map[string]string{"alpha": keyAlpha, "beta": keyBeta},
		TriggerNodes: 1,
		RetryTiers:   []time.Duration{time.Second},
	})
	consoleURL := startConsole(t, mesh)
	tg := &target{}
	targetServer := httptest.NewServer(tg)
	t.Cleanup(targetServer.Close)

	ctx := context.Background()
	auth := rpctest.Bearer(keyAlpha)
	clients := meshtest.NewClients(mesh, keyAlpha)
	jobs, alerting, dispatcher, history, keys := clients.Jobs, clients.Alerts, clients.Dispatch, clients.History, clients.Keys

	// What the browser finds when it arrives: an alert rule on dead
	// letters, and a job that fails once, without retries, into one.
	channel, err := alerting.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: &alertingv1.Channel{
		DisplayName: "e2e hook", Kind: &alertingv1.Channel_Webhook{Webhook: &alertingv1.WebhookChannel{Url: targetServer.URL + "/hook", SigningSecret: "whsec_a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s="}},
	}}))
	require.NoError(t, err)
	_, err = alerting.CreateRule(ctx, connect.NewRequest(&alertingv1.CreateRuleRequest{Rule: &alertingv1.Rule{
		DisplayName: "failing jobs dead-letter", Selector: &alertingv1.JobSelector{Labels: map[string]string{"e2e": "failing"}},
		Condition:  &alertingv1.Rule_DeadLettered{DeadLettered: &alertingv1.DeadLettered{}},
		ChannelIds: []string{channel.Msg.GetChannel().GetId()},
	}}))
	require.NoError(t, err)
	noRetries := int32(0)
	failing, err := jobs.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: &registryv1.Job{
		DisplayName: "e2e failing job", Labels: map[string]string{"e2e": "failing"},
		Schedule:    &registryv1.Schedule{Kind: &registryv1.Schedule_At{At: timestamppb.New(time.Now().Add(2 * time.Second))}},
		Target:      &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: targetServer.URL + "/fail"}}},
		RetryPolicy: &registryv1.RetryPolicy{MaxRetries: &noRetries},
	}}))
	require.NoError(t, err)
	failingID := failing.Msg.GetJob().GetId()
	var deadLetter *dispatcherv1.DeadLetter
	require.Eventually(t, func() bool {
		res, err := dispatcher.ListDeadLetters(ctx, connect.NewRequest(&dispatcherv1.ListDeadLettersRequest{JobId: failingID}))
		if err != nil || len(res.Msg.GetDeadLetters()) == 0 {
			return false
		}
		deadLetter = res.Msg.GetDeadLetters()[0]
		return true
	}, 60*time.Second, 250*time.Millisecond, "the failing job's dead letter")
	require.Eventually(t, func() bool {
		res, err := alerting.ListIncidents(ctx, connect.NewRequest(&alertingv1.ListIncidentsRequest{JobId: failingID, State: alertingv1.IncidentState_INCIDENT_STATE_OPEN}))
		return err == nil && len(res.Msg.GetIncidents()) == 1
	}, 60*time.Second, 250*time.Millisecond, "the dead letter's incident")

	// A viewer key of alpha, to check that it is offered no change.
	viewer, err := keys.CreateKey(ctx, connect.NewRequest(&registryv1.CreateKeyRequest{Name: "e2e viewer", Role: registryv1.KeyRole_KEY_ROLE_VIEWER}))
	require.NoError(t, err)

	// The email channel the browser creates sends its tests here.
	mailbox := smtptest.Start(t)

	script := exec.Command("node", "e2e/console.mjs")
	script.Dir = filepath.Join(consoleDir(t), "web")
	script.Env = append(os.Environ(),
		"CONSOLE_URL="+consoleURL, "KEY_ALPHA="+keyAlpha, "KEY_BETA="+keyBeta, "KEY_VIEWER="+viewer.Msg.GetSecret(),
		"TARGET_URL="+targetServer.URL, "CHROMIUM="+chromium(), "FAILING_JOB="+failing.Msg.GetJob().GetDisplayName(),
		"SMTP_HOST="+mailbox.Host(), "SMTP_PORT="+strconv.Itoa(mailbox.Port()),
		"SMTP_USERNAME="+mailbox.Username, "SMTP_PASSWORD="+mailbox.Password,
		"SCREENSHOTS="+os.Getenv("CRONMESH_CONSOLE_SCREENSHOTS"))
	var output bytes.Buffer
	script.Stdout, script.Stderr = &output, &output
	runErr := script.Run()
	t.Logf("browser script:\n%s", output.String())
	require.NoError(t, runErr, "the browser script failed")

	// What the browser did, as the services see it. The job made through
	// the form exists with the valid cron, and it ran.
	list, err := jobs.ListJobs(ctx, connect.NewRequest(&registryv1.ListJobsRequest{PageSize: 100}))
	require.NoError(t, err)
	var formJob *registryv1.Job
	for _, j := range list.Msg.GetJobs() {
		if j.GetDisplayName() == "e2e every 2 seconds" {
			formJob = j
		}
	}
	require.NotNil(t, formJob, "the job created through the form")
	assert.Equal(t, "*/2 * * * * *", formJob.GetSchedule().GetCron())
	assert.Equal(t, targetServer.URL+"/ok", formJob.GetTarget().GetHttp().GetUrl())
	assert.Positive(t, tg.ok.Load())

	// The dead letter was redriven to the override and succeeded; the
	// incident was acknowledged, then resolved by hand, before that.
	require.Eventually(t, func() bool {
		res, err := history.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: deadLetter.GetExecutionId()}))
		return err == nil && res.Msg.GetExecution().GetStatus() == historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED
	}, 30*time.Second, 250*time.Millisecond, "the redriven execution succeeded")
	left, err := dispatcher.ListDeadLetters(ctx, connect.NewRequest(&dispatcherv1.ListDeadLettersRequest{JobId: failingID}))
	require.NoError(t, err)
	assert.Empty(t, left.Msg.GetDeadLetters())
	incidents, err := alerting.ListIncidents(ctx, connect.NewRequest(&alertingv1.ListIncidentsRequest{JobId: failingID}))
	require.NoError(t, err)
	require.Len(t, incidents.Msg.GetIncidents(), 1)
	assert.NotNil(t, incidents.Msg.GetIncidents()[0].GetAcknowledgeTime(), "acknowledged from the console")
	assert.Equal(t, apikey.ConfiguredKeyID(keyAlpha), incidents.Msg.GetIncidents()[0].GetResolvedBy(), "resolved from the console")
	assert.Equal(t, int64(1), tg.fail.Load(), "the redrive went to the override, not to /fail")

	// The email channel made through the form is stored as typed, with
	// the password set at the first edit kept by the second; its tests
	// reached the SMTP server after the password was fixed, not before.
	chans, err := alerting.ListChannels(ctx, connect.NewRequest(&alertingv1.ListChannelsRequest{}))
	require.NoError(t, err)
	var mail *alertingv1.EmailChannel
	for _, c := range chans.Msg.GetChannels() {
		if c.GetDisplayName() == "e2e mail" {
			mail = c.GetEmail()
		}
	}
	require.NotNil(t, mail, "the email channel created through the form")
	assert.Equal(t, mailbox.Host(), mail.GetHost())
	assert.Equal(t, int32(mailbox.Port()), mail.GetPort())
	assert.Equal(t, alertingv1.SmtpSecurity_SMTP_SECURITY_NONE, mail.GetSecurity())
	assert.Equal(t, mailbox.Username, mail.GetUsername())
	assert.True(t, mail.GetHasPassword())
	assert.Equal(t, "cronmesh@example.test", mail.GetFrom())
	assert.Equal(t, []string{"oncall@example.test", "second@example.test"}, mail.GetTo())
	sent := mailbox.Messages()
	require.Len(t, sent, 2, "one message per test after the password was fixed")
	assert.Equal(t, []string{"oncall@example.test"}, sent[0].To)
	assert.Equal(t, []string{"oncall@example.test", "second@example.test"}, sent[1].To)
	for _, m := range sent {
		assert.Equal(t, "cronmesh@example.test", m.From)
		assert.Equal(t, "[cronmesh] test notification", m.Subject)
	}

	// The viewer signed in and browsed without a single refused call: the
	// console asks GetCallerIdentity what the key may do rather than trying.
	for name, url := range map[string]string{"registry": mesh.Registry.URL, "alerting": mesh.Alerting.URL, "dispatcher": mesh.Dispatcher.URL} {
		events, err := auditv1connect.NewAuditServiceClient(http.DefaultClient, url, auth).
			ListAuditEvents(ctx, connect.NewRequest(&auditv1.ListAuditEventsRequest{KeyId: viewer.Msg.GetKey().GetId()}))
		require.NoError(t, err)
		assert.Emptyf(t, events.Msg.GetEvents(), "the viewer's calls in the %s's audit log", name)
	}
}
