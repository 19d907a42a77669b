package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1/alertingv1connect"
)

func TestRuleFlags(t *testing.T) {
	t.Parallel()
	f := ruleFlags{name: "pager", jobs: stringList{"j1"}, labels: keyValues{"team": "ops"}, consecutiveFailures: 3, channels: stringList{"c1", "c2"}}
	require.NoError(t, f.disabled.Set("true"))
	r := &alertingv1.Rule{}
	fields, err := f.apply(r)
	require.NoError(t, err)
	assert.Equal(t, []string{"displayName", "selector", "condition", "channelIds", "disabled"}, fields)
	assert.True(t, proto.Equal(&alertingv1.Rule{
		DisplayName: "pager", Selector: &alertingv1.JobSelector{JobIds: []string{"j1"}, Labels: map[string]string{"team": "ops"}},
		Condition:  &alertingv1.Rule_ConsecutiveFailures{ConsecutiveFailures: &alertingv1.ConsecutiveFailures{Count: 3}},
		ChannelIds: []string{"c1", "c2"}, Disabled: true,
	}, r), "%v", r)
	assert.Equal(t, "3 consecutive failures", conditionText(r))
	assert.Equal(t, "j1 with team=ops", selectorText(r.GetSelector()))
	assert.Equal(t, "every job", selectorText(nil))

	_, err = (&ruleFlags{consecutiveFailures: 3, deadLettered: true}).apply(&alertingv1.Rule{})
	var uerr usageError
	assert.ErrorAs(t, err, &uerr, "two conditions")

	fields, err = (&ruleFlags{}).apply(&alertingv1.Rule{})
	require.NoError(t, err)
	assert.Empty(t, fields, "no flags, no fields: --disabled not given leaves it alone")
}

func TestOverlayRule(t *testing.T) {
	t.Parallel()
	stored := &alertingv1.Rule{
		Id: "r1", DisplayName: "old", ChannelIds: []string{"c1"},
		Condition: &alertingv1.Rule_DeadLettered{DeadLettered: &alertingv1.DeadLettered{}},
		Selector:  &alertingv1.JobSelector{JobIds: []string{"j1"}},
	}
	given := &alertingv1.Rule{
		DisplayName: "new",
		Condition:   &alertingv1.Rule_MissedSchedule{MissedSchedule: &alertingv1.MissedSchedule{Tolerance: durationpb.New(time.Minute)}},
		ChannelIds:  []string{"ignored: not in fields"},
	}
	// "missedSchedule" is how a file names the condition.
	overlayRule(stored, given, []string{"displayName", "missedSchedule"})
	assert.Equal(t, "new", stored.GetDisplayName())
	assert.Equal(t, "missed schedule (tolerance 1m0s)", conditionText(stored))
	assert.Equal(t, []string{"c1"}, stored.GetChannelIds())
	assert.Equal(t, []string{"j1"}, stored.GetSelector().GetJobIds())
	assert.Equal(t, "r1", stored.GetId())
}

func TestChannelFlags(t *testing.T) {
	t.Parallel()
	t.Run("webhook", func(t *testing.T) {
		t.Parallel()
		c := &alertingv1.Channel{}
		fields, err := (&channelFlags{name: "ops", webhookURL: "https://hooks.example.invalid/a"}).apply(c, "whsec_c2VjcmV0")
		require.NoError(t, err)
		assert.Equal(t, []string{"displayName", "webhook", "secret"}, fields)
		assert.Equal(t, "https://hooks.example.invalid/a", c.GetWebhook().GetUrl())
		assert.Equal(t, "whsec_c2VjcmV0", c.GetWebhook().GetSigningSecret())
	})
	t.Run("email keeps what is not given", func(t *testing.T) {
		t.Parallel()
		c := &alertingv1.Channel{Kind: &alertingv1.Channel_Email{Email: &alertingv1.EmailChannel{
			Host: "smtp.example.invalid", Port: 587, From: "cron@example.invalid", To: []string{"a@example.invalid"}, HasPassword: true,
		}}}
		_, err := (&channelFlags{to: stringList{"b@example.invalid"}, smtpSecurity: "TLS"}).apply(c, "")
		require.NoError(t, err)
		e := c.GetEmail()
		assert.Equal(t, "smtp.example.invalid", e.GetHost())
		assert.EqualValues(t, 587, e.GetPort())
		assert.Equal(t, []string{"b@example.invalid"}, e.GetTo())
		assert.Equal(t, alertingv1.SmtpSecurity_SMTP_SECURITY_TLS, e.GetSecurity())
		assert.Empty(t, e.GetPassword(), "no secret given: the stored one is kept (empty on update)")
	})
	t.Run("errors", func(t *testing.T) {
		t.Parallel()
		var uerr usageError
		_, err := (&channelFlags{webhookURL: "https://a.invalid", from: "x@example.invalid"}).apply(&alertingv1.Channel{}, "")
		assert.ErrorAs(t, err, &uerr, "webhook and email flags together")
		_, err = (&channelFlags{smtpSecurity: "ssl"}).apply(&alertingv1.Channel{}, "")
		assert.ErrorAs(t, err, &uerr)
		_, err = (&channelFlags{}).apply(&alertingv1.Channel{}, "whsec_x")
		assert.ErrorAs(t, err, &uerr, "a secret without a kind")
	})
	t.Run("redact", func(t *testing.T) {
		t.Parallel()
		c := &alertingv1.Channel{Kind: &alertingv1.Channel_Webhook{Webhook: &alertingv1.WebhookChannel{Url: "https://a.invalid", SigningSecret: "whsec_c2VjcmV0"}}}
		r := redactChannel(c)
		assert.Empty(t, r.GetWebhook().GetSigningSecret())
		assert.True(t, r.GetWebhook().GetHasSigningSecret())
		assert.Equal(t, "whsec_c2VjcmV0", c.GetWebhook().GetSigningSecret(), "the original is not changed")
	})
}

// fakeAlerts records what it was sent and, to prove the CLI's masking,
// echoes the secret it received back in an error message and a field.
type fakeAlerts struct {
	alertingv1connect.UnimplementedAlertServiceHandler
	mu       sync.Mutex
	created  []*alertingv1.Channel
	updated  []*alertingv1.Channel
	rules    []*alertingv1.Rule
	stored   *alertingv1.Channel
	incState []alertingv1.IncidentState
}

func (f *fakeAlerts) CreateChannel(_ context.Context, req *connect.Request[alertingv1.CreateChannelRequest]) (*connect.Response[alertingv1.CreateChannelResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := req.Msg.GetChannel()
	f.created = append(f.created, c)
	if c.GetDisplayName() == "echo-error" {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("bad secret %q", c.GetWebhook().GetSigningSecret()+c.GetEmail().GetPassword()))
	}
	out := proto.CloneOf(c)
	out.Id = "11111111-1111-4111-8111-111111111111"
	// A misbehaving server: the secret comes back.
	return connect.NewResponse(&alertingv1.CreateChannelResponse{Channel: out}), nil
}

func (f *fakeAlerts) GetChannel(_ context.Context, req *connect.Request[alertingv1.GetChannelRequest]) (*connect.Response[alertingv1.GetChannelResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return connect.NewResponse(&alertingv1.GetChannelResponse{Channel: proto.CloneOf(f.stored)}), nil
}

func (f *fakeAlerts) UpdateChannel(_ context.Context, req *connect.Request[alertingv1.UpdateChannelRequest]) (*connect.Response[alertingv1.UpdateChannelResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updated = append(f.updated, req.Msg.GetChannel())
	return connect.NewResponse(&alertingv1.UpdateChannelResponse{Channel: req.Msg.GetChannel()}), nil
}

func (f *fakeAlerts) TestChannel(_ context.Context, req *connect.Request[alertingv1.TestChannelRequest]) (*connect.Response[alertingv1.TestChannelResponse], error) {
	if req.Msg.GetId() == "good" {
		return connect.NewResponse(&alertingv1.TestChannelResponse{Delivered: true}), nil
	}
	return connect.NewResponse(&alertingv1.TestChannelResponse{Error: "HTTP 500"}), nil
}

func (f *fakeAlerts) GetRule(_ context.Context, req *connect.Request[alertingv1.GetRuleRequest]) (*connect.Response[alertingv1.GetRuleResponse], error) {
	return connect.NewResponse(&alertingv1.GetRuleResponse{Rule: &alertingv1.Rule{
		Id: req.Msg.GetId(), DisplayName: "stored", ChannelIds: []string{"c1"},
		Condition: &alertingv1.Rule_ConsecutiveFailures{ConsecutiveFailures: &alertingv1.ConsecutiveFailures{Count: 3}},
	}}), nil
}

func (f *fakeAlerts) UpdateRule(_ context.Context, req *connect.Request[alertingv1.UpdateRuleRequest]) (*connect.Response[alertingv1.UpdateRuleResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, req.Msg.GetRule())
	return connect.NewResponse(&alertingv1.UpdateRuleResponse{Rule: req.Msg.GetRule()}), nil
}

func (f *fakeAlerts) ListIncidents(_ context.Context, req *connect.Request[alertingv1.ListIncidentsRequest]) (*connect.Response[alertingv1.ListIncidentsResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.incState = append(f.incState, req.Msg.GetState())
	return connect.NewResponse(&alertingv1.ListIncidentsResponse{Incidents: []*alertingv1.Incident{{
		Id: "i1", RuleId: "r1", JobId: "j1", JobDisplayName: "report", State: alertingv1.IncidentState_INCIDENT_STATE_OPEN,
		Kind: alertingv1.IncidentKind_INCIDENT_KIND_CONSECUTIVE_FAILURES, Summary: "3 executions in a row failed",
	}}}), nil
}

func startFakeAlerts(t *testing.T) (*fakeAlerts, *httptest.Server) {
	t.Helper()
	fake := &fakeAlerts{}
	mux := http.NewServeMux()
	mux.Handle(alertingv1connect.NewAlertServiceHandler(fake))
	srv := newH2CServer(t, mux)
	return fake, srv
}

// TestChannelSecretsNeverPrinted: the secret reaches the server, and
// nothing cronctl prints holds it, even when the server echoes it in a
// response or an error.
func TestChannelSecretsNeverPrinted(t *testing.T) {
	t.Parallel()
	fake, srv := startFakeAlerts(t)
	const secret = "whsec_dW5pdC10ZXN0LXNpZ25pbmctc2VjcmV0LTAxMjM="
	const password = "smtp-Pa55word-unit"
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secretFile, []byte(secret+"\n"), 0o600))
	chanFile := filepath.Join(dir, "channel.yaml")
	require.NoError(t, os.WriteFile(chanFile, []byte("displayName: mail\nemail:\n  host: smtp.example.invalid\n  port: 587\n  username: cron\n  password: "+password+"\n  from: cron@example.invalid\n  to: [ops@example.invalid]\n"), 0o600))

	var printed []string
	run := func(env map[string]string, args ...string) (string, string, int) {
		out, errOut, code := runAgainst(t, srv, env, args...)
		printed = append(printed, out, errOut)
		return out, errOut, code
	}
	for _, format := range []string{"table", "json", "yaml"} {
		out, errOut, code := run(nil, "alerts", "channels", "create", "--name", "ops", "--webhook-url", "https://hooks.example.invalid/a", "--secret-file", secretFile, "-o", format)
		require.Equal(t, ExitOK, code, errOut)
		assert.Contains(t, out, "11111111-1111-4111-8111-111111111111")
	}
	_, errOut, code := run(map[string]string{"HOOK_SECRET": secret}, "alerts", "channels", "create", "--name", "echo-error", "--webhook-url", "https://hooks.example.invalid/a", "--secret-env", "HOOK_SECRET")
	require.Equal(t, ExitError, code)
	assert.Contains(t, errOut, "error: invalid_argument: bad secret")
	assert.Contains(t, errOut, "<redacted>")

	out, errOut, code := run(nil, "alerts", "channels", "create", "-f", chanFile, "-o", "json")
	require.Equal(t, ExitOK, code, errOut)
	assert.Contains(t, out, `"hasPassword": true`)

	fake.mu.Lock()
	require.Len(t, fake.created, 5)
	assert.Equal(t, secret, fake.created[0].GetWebhook().GetSigningSecret(), "the secret is sent, trimmed of the file's newline")
	assert.Equal(t, secret, fake.created[3].GetWebhook().GetSigningSecret())
	assert.Equal(t, password, fake.created[4].GetEmail().GetPassword())
	fake.stored = &alertingv1.Channel{Id: "c1", DisplayName: "mail", Kind: &alertingv1.Channel_Email{Email: proto.CloneOf(fake.created[4].GetEmail())}}
	fake.stored.GetEmail().Password, fake.stored.GetEmail().HasPassword = "", true
	fake.mu.Unlock()

	// Update: what is not given is kept, the stored password included
	// (sent empty).
	_, errOut, code = run(nil, "alerts", "channels", "update", "c1", "--to", "new@example.invalid")
	require.Equal(t, ExitOK, code, errOut)
	fake.mu.Lock()
	got := fake.updated[0].GetEmail()
	fake.mu.Unlock()
	assert.Equal(t, []string{"new@example.invalid"}, got.GetTo())
	assert.Equal(t, "smtp.example.invalid", got.GetHost())
	assert.Empty(t, got.GetPassword())

	_, _, code = run(nil, "alerts", "channels", "update", "c1")
	assert.Equal(t, ExitUsage, code, "nothing to change")

	for _, p := range printed {
		assert.NotContains(t, p, secret)
		assert.NotContains(t, p, password)
	}
}

func TestChannelTestExitCode(t *testing.T) {
	t.Parallel()
	_, srv := startFakeAlerts(t)
	out, _, code := runAgainst(t, srv, nil, "alerts", "channels", "test", "good")
	assert.Equal(t, ExitOK, code)
	assert.Regexp(t, `(?m)^delivered:\s+true$`, out)
	out, errOut, code := runAgainst(t, srv, nil, "alerts", "channels", "test", "bad")
	assert.Equal(t, ExitError, code, "a channel that refuses the test fails the command")
	assert.Regexp(t, `(?m)^delivered:\s+false$`, out)
	assert.Contains(t, errOut, "HTTP 500")
}

func TestRulesUpdateKeepsWhatIsNotGiven(t *testing.T) {
	t.Parallel()
	fake, srv := startFakeAlerts(t)
	file := filepath.Join(t.TempDir(), "rule.yaml")
	require.NoError(t, os.WriteFile(file, []byte("noSuccessWithin: {duration: 3600s}\n"), 0o600))
	_, errOut, code := runAgainst(t, srv, nil, "alerts", "rules", "update", "r1", "-f", file, "--disabled")
	require.Equal(t, ExitOK, code, errOut)
	require.Len(t, fake.rules, 1)
	r := fake.rules[0]
	assert.Equal(t, "stored", r.GetDisplayName())
	assert.Equal(t, []string{"c1"}, r.GetChannelIds())
	assert.Equal(t, time.Hour, r.GetNoSuccessWithin().GetDuration().AsDuration())
	assert.True(t, r.GetDisabled())

	require.NoError(t, os.WriteFile(file, []byte("noSuchField: 1\n"), 0o600))
	_, errOut, code = runAgainst(t, srv, nil, "alerts", "rules", "update", "r1", "-f", file)
	assert.Equal(t, ExitError, code)
	assert.Contains(t, errOut, "noSuchField")
}

func (f *fakeAlerts) ResolveIncident(_ context.Context, req *connect.Request[alertingv1.ResolveIncidentRequest]) (*connect.Response[alertingv1.ResolveIncidentResponse], error) {
	if req.Msg.GetId() != "i1" {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("incident not found"))
	}
	return connect.NewResponse(&alertingv1.ResolveIncidentResponse{Incident: &alertingv1.Incident{
		Id: "i1", State: alertingv1.IncidentState_INCIDENT_STATE_RESOLVED, ResolveReason: "resolved by key key_1", ResolvedBy: "key_1",
	}}), nil
}

func TestIncidentsResolve(t *testing.T) {
	t.Parallel()
	_, srv := startFakeAlerts(t)
	out, errOut, code := runAgainst(t, srv, nil, "alerts", "incidents", "resolve", "i1")
	require.Equal(t, ExitOK, code, errOut)
	assert.Regexp(t, `(?m)^state:?\s+resolved$`, out)
	assert.Regexp(t, `(?m)^resolve reason:?\s+resolved by key key_1$`, out)
	assert.Regexp(t, `(?m)^resolved by:?\s+key_1$`, out)
	_, errOut, code = runAgainst(t, srv, nil, "alerts", "incidents", "resolve", "i2")
	assert.Equal(t, ExitError, code)
	assert.Contains(t, errOut, "not_found")
}

func TestIncidentsList(t *testing.T) {
	t.Parallel()
	fake, srv := startFakeAlerts(t)
	out, errOut, code := runAgainst(t, srv, nil, "alerts", "incidents", "list", "--state", "Open")
	require.Equal(t, ExitOK, code, errOut)
	assert.Equal(t, []alertingv1.IncidentState{alertingv1.IncidentState_INCIDENT_STATE_OPEN}, fake.incState)
	assert.Regexp(t, `(?m)^ID\s+STATE\s+KIND\s+JOB\s+RULE\s+OPENED\s+RESOLVED\s+SUMMARY$`, out)
	assert.Regexp(t, `(?m)^i1\s+open\s+consecutive-failures\s+j1 \(report\)\s+r1\s+-\s+-\s+3 executions in a row failed$`, out)
	_, _, code = runAgainst(t, srv, nil, "alerts", "incidents", "list", "--state", "closed")
	assert.Equal(t, ExitUsage, code)
}
