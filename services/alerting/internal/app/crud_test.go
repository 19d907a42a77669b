package app_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
	"github.com/cronmesh/cronmesh/libs/testkit/smtptest"
)

// TestRuleAndChannelCRUD walks rules and channels through create, get,
// list, update and delete over both protocols, and checks that secrets
// never come back and that namespaces do not see each other.
func TestRuleAndChannelCRUD(t *testing.T) {
	t.Parallel()
	a := startAlerting(t)
	for _, p := range rpctest.Protocols() {
		t.Run(p.Name, func(t *testing.T) {
			ctx := context.Background()
			c := a.client(keyAlpha, p.Opts...)
			ch, err := c.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: webhookChannel("https://hooks.invalid/x")}))
			require.NoError(t, err)
			hook := ch.Msg.Channel.GetWebhook()
			require.Empty(t, hook.SigningSecret, "the secret is never returned")
			require.True(t, hook.HasSigningSecret)
			require.NotEmpty(t, ch.Msg.Channel.Id)

			rule, err := c.CreateRule(ctx, connect.NewRequest(&alertingv1.CreateRuleRequest{Rule: failuresRule(3, ch.Msg.Channel.Id)}))
			require.NoError(t, err)
			require.NotEmpty(t, rule.Msg.Rule.Id)
			require.NotNil(t, rule.Msg.Rule.CreateTime)

			got, err := c.GetRule(ctx, connect.NewRequest(&alertingv1.GetRuleRequest{Id: rule.Msg.Rule.Id}))
			require.NoError(t, err)
			require.Equal(t, int32(3), got.Msg.Rule.GetConsecutiveFailures().GetCount())
			require.Equal(t, []string{ch.Msg.Channel.Id}, got.Msg.Rule.ChannelIds)

			upd := got.Msg.Rule
			upd.Condition = &alertingv1.Rule_MissedSchedule{MissedSchedule: &alertingv1.MissedSchedule{Tolerance: durationpb.New(30e9)}}
			upd.Selector = &alertingv1.JobSelector{Labels: map[string]string{"team": "ops"}}
			updated, err := c.UpdateRule(ctx, connect.NewRequest(&alertingv1.UpdateRuleRequest{Rule: upd}))
			require.NoError(t, err)
			require.Equal(t, "ops", updated.Msg.Rule.Selector.Labels["team"])
			require.Equal(t, got.Msg.Rule.CreateTime.AsTime(), updated.Msg.Rule.CreateTime.AsTime())

			// An update without a secret keeps it.
			chUpd := ch.Msg.Channel
			chUpd.DisplayName = "renamed"
			chUpd.GetWebhook().Url = "https://hooks.invalid/y"
			cu, err := c.UpdateChannel(ctx, connect.NewRequest(&alertingv1.UpdateChannelRequest{Channel: chUpd}))
			require.NoError(t, err)
			require.True(t, cu.Msg.Channel.GetWebhook().HasSigningSecret)
			require.Equal(t, "renamed", cu.Msg.Channel.DisplayName)

			// The rule names the channel: it cannot go.
			_, err = c.DeleteChannel(ctx, connect.NewRequest(&alertingv1.DeleteChannelRequest{Id: ch.Msg.Channel.Id}))
			rpctest.RequireCode(t, err, connect.CodeFailedPrecondition)

			// Other namespaces see nothing.
			beta := a.client(keyBeta, p.Opts...)
			_, err = beta.GetRule(ctx, connect.NewRequest(&alertingv1.GetRuleRequest{Id: rule.Msg.Rule.Id}))
			rpctest.RequireCode(t, err, connect.CodeNotFound)
			_, err = beta.CreateRule(ctx, connect.NewRequest(&alertingv1.CreateRuleRequest{Rule: failuresRule(1, ch.Msg.Channel.Id)}))
			require.Contains(t, rpctest.Violations(t, err), "rule.channel_ids", "a channel of another namespace does not exist")

			_, err = c.DeleteRule(ctx, connect.NewRequest(&alertingv1.DeleteRuleRequest{Id: rule.Msg.Rule.Id}))
			require.NoError(t, err)
			_, err = c.GetRule(ctx, connect.NewRequest(&alertingv1.GetRuleRequest{Id: rule.Msg.Rule.Id}))
			rpctest.RequireCode(t, err, connect.CodeNotFound)
			_, err = c.DeleteChannel(ctx, connect.NewRequest(&alertingv1.DeleteChannelRequest{Id: ch.Msg.Channel.Id}))
			require.NoError(t, err)
			_, err = c.GetChannel(ctx, connect.NewRequest(&alertingv1.GetChannelRequest{Id: ch.Msg.Channel.Id}))
			rpctest.RequireCode(t, err, connect.CodeNotFound)
		})
	}
}

// TestListPages pages through rules with a small page size.
func TestListPages(t *testing.T) {
	t.Parallel()
	a := startAlerting(t)
	ctx := context.Background()
	c := a.client(keyAlpha)
	ch, err := c.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: webhookChannel("https://hooks.invalid/x")}))
	require.NoError(t, err)
	var want []string
	for range 5 {
		r, err := c.CreateRule(ctx, connect.NewRequest(&alertingv1.CreateRuleRequest{Rule: failuresRule(2, ch.Msg.Channel.Id)}))
		require.NoError(t, err)
		want = append(want, r.Msg.Rule.Id)
	}
	var got []string
	token := ""
	for {
		resp, err := c.ListRules(ctx, connect.NewRequest(&alertingv1.ListRulesRequest{PageSize: 2, PageToken: token}))
		require.NoError(t, err)
		for _, r := range resp.Msg.Rules {
			got = append(got, r.Id)
		}
		if token = resp.Msg.NextPageToken; token == "" {
			break
		}
	}
	require.Equal(t, want, got)
	_, err = c.ListRules(ctx, connect.NewRequest(&alertingv1.ListRulesRequest{PageToken: "garbage!"}))
	require.Contains(t, rpctest.Violations(t, err), "page_token")
}

// TestValidation names the wrong field of each bad request.
func TestValidation(t *testing.T) {
	t.Parallel()
	a := startAlerting(t)
	ctx := context.Background()
	c := a.client(keyAlpha)
	good := "0190f5d2-7b6c-7000-8000-000000000000"
	for _, tc := range []struct {
		name  string
		rule  *alertingv1.Rule
		field string
	}{
		{"no condition", &alertingv1.Rule{ChannelIds: []string{good}}, "rule.condition"},
		{"zero count", failuresRule(0, good), "rule.consecutive_failures.count"},
		{"no channels", failuresRule(3), "rule.channel_ids"},
		{"bad channel id", failuresRule(3, "nope"), "rule.channel_ids[0]"},
		{"tolerance too small", missedRule(1, good), "rule.missed_schedule.tolerance"},
		{"long name", &alertingv1.Rule{DisplayName: strings.Repeat("x", 201), Condition: &alertingv1.Rule_DeadLettered{DeadLettered: &alertingv1.DeadLettered{}}, ChannelIds: []string{good}}, "rule.display_name"},
	} {
		t.Run("rule/"+tc.name, func(t *testing.T) {
			_, err := c.CreateRule(ctx, connect.NewRequest(&alertingv1.CreateRuleRequest{Rule: tc.rule}))
			require.Contains(t, rpctest.Violations(t, err), tc.field)
		})
	}
	for _, tc := range []struct {
		name    string
		channel *alertingv1.Channel
		field   string
	}{
		{"no kind", &alertingv1.Channel{}, "channel.kind"},
		{"bad url", webhookChannel("ftp://x"), "channel.webhook.url"},
		{"no secret", &alertingv1.Channel{Kind: &alertingv1.Channel_Webhook{Webhook: &alertingv1.WebhookChannel{Url: "https://x.invalid"}}}, "channel.webhook.signing_secret"},
		{"bad secret", &alertingv1.Channel{Kind: &alertingv1.Channel_Webhook{Webhook: &alertingv1.WebhookChannel{Url: "https://x.invalid", SigningSecret: "hunter2"}}}, "channel.webhook.signing_secret"},
		{"email port", &alertingv1.Channel{Kind: &alertingv1.Channel_Email{Email: &alertingv1.EmailChannel{Host: "h", Port: 0, From: "a@b.invalid", To: []string{"c@d.invalid"}}}}, "channel.email.port"},
		{"email to", &alertingv1.Channel{Kind: &alertingv1.Channel_Email{Email: &alertingv1.EmailChannel{Host: "h", Port: 25, From: "a@b.invalid", To: []string{"not an address"}}}}, "channel.email.to[0]"},
	} {
		t.Run("channel/"+tc.name, func(t *testing.T) {
			_, err := c.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: tc.channel}))
			require.Contains(t, rpctest.Violations(t, err), tc.field)
		})
	}
	_, err := c.GetIncident(ctx, connect.NewRequest(&alertingv1.GetIncidentRequest{Id: good}))
	rpctest.RequireCode(t, err, connect.CodeNotFound)
	_, err = a.client("wrong-key").ListRules(ctx, connect.NewRequest(&alertingv1.ListRulesRequest{}))
	rpctest.RequireCode(t, err, connect.CodeUnauthenticated)
}

// TestTestChannel sends a test notification through a webhook (the
// receiver checks the Standard Webhooks signature) and through a real SMTP
// server with authentication, and reports a channel that refuses.
func TestTestChannel(t *testing.T) {
	t.Parallel()
	a := startAlerting(t)
	ctx := context.Background()
	c := a.client(keyAlpha)

	rcv := startReceiver(t)
	hook, err := c.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: webhookChannel(rcv.srv.URL)}))
	require.NoError(t, err)
	res, err := c.TestChannel(ctx, connect.NewRequest(&alertingv1.TestChannelRequest{Id: hook.Msg.Channel.Id}))
	require.NoError(t, err)
	require.True(t, res.Msg.Delivered, res.Msg.Error)
	require.Len(t, rcv.received(), 1)
	require.Equal(t, "channel.test", rcv.received()[0].Payload.Type)

	rcv.setDown(true)
	res, err = c.TestChannel(ctx, connect.NewRequest(&alertingv1.TestChannelRequest{Id: hook.Msg.Channel.Id}))
	require.NoError(t, err)
	require.False(t, res.Msg.Delivered)
	require.Contains(t, res.Msg.Error, "503")

	// A receiver that cannot be reached: the error names the host, not the
	// URL's path, which is often the receiver's secret.
	gone, err := c.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: webhookChannel("http://127.0.0.1:1/hooks/secret-token-path")}))
	require.NoError(t, err)
	res, err = c.TestChannel(ctx, connect.NewRequest(&alertingv1.TestChannelRequest{Id: gone.Msg.Channel.Id}))
	require.NoError(t, err)
	require.False(t, res.Msg.Delivered)
	require.Contains(t, res.Msg.Error, "127.0.0.1:1")
	require.NotContains(t, res.Msg.Error, "secret-token-path")

	smtp := smtptest.Start(t)
	email, err := c.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: emailChannel(smtp)}))
	require.NoError(t, err)
	require.Empty(t, email.Msg.Channel.GetEmail().Password)
	require.True(t, email.Msg.Channel.GetEmail().HasPassword)
	res, err = c.TestChannel(ctx, connect.NewRequest(&alertingv1.TestChannelRequest{Id: email.Msg.Channel.Id}))
	require.NoError(t, err)
	require.True(t, res.Msg.Delivered, res.Msg.Error)
	msgs := smtp.Messages()
	require.Len(t, msgs, 1)
	require.Equal(t, "alerts@cronmesh.invalid", msgs[0].From)
	require.Equal(t, []string{"oncall@example.invalid", "lead@example.invalid"}, msgs[0].To)
	require.Equal(t, "[cronmesh] test notification", msgs[0].Subject)
	require.Contains(t, msgs[0].Body, "The channel works")

	// A wrong password is reported, and the password is not in the error.
	bad := emailChannel(smtp)
	bad.GetEmail().Password = "wrong-password"
	badCh, err := c.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: bad}))
	require.NoError(t, err)
	res, err = c.TestChannel(ctx, connect.NewRequest(&alertingv1.TestChannelRequest{Id: badCh.Msg.Channel.Id}))
	require.NoError(t, err)
	require.False(t, res.Msg.Delivered)
	require.NotContains(t, res.Msg.Error, "wrong-password")
}

func emailChannel(s *smtptest.Server) *alertingv1.Channel {
	return &alertingv1.Channel{
		DisplayName: "oncall mail",
		Kind: &alertingv1.Channel_Email{Email: &alertingv1.EmailChannel{
			Host: s.Host(), Port: int32(s.Port()), Security: alertingv1.SmtpSecurity_SMTP_SECURITY_NONE,
			Username: s.Username, Password: s.Password,
			From: "alerts@cronmesh.invalid", To: []string{"oncall@example.invalid", "lead@example.invalid"},
		}},
	}
}
