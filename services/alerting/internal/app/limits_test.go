package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1/alertingv1connect"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
)

// TestRequestFieldCaps sends, for each capped string, list and map of the
// AlertService requests, a request just over its cap: each fails with
// INVALID_ARGUMENT naming the field.
func TestRequestFieldCaps(t *testing.T) {
	t.Parallel()
	a := startAlerting(t)
	c := a.client(keyAlpha)
	tooLong := strings.Repeat("x", 2049)
	channel := uuid.NewString()
	rule := func(edit func(r *alertingv1.Rule)) func(context.Context, alertingv1connect.AlertServiceClient) error {
		return func(ctx context.Context, c alertingv1connect.AlertServiceClient) error {
			r := failuresRule(3, channel)
			edit(r)
			_, err := c.CreateRule(ctx, connect.NewRequest(&alertingv1.CreateRuleRequest{Rule: r}))
			return err
		}
	}
	email := func(edit func(e *alertingv1.EmailChannel)) func(context.Context, alertingv1connect.AlertServiceClient) error {
		return func(ctx context.Context, c alertingv1connect.AlertServiceClient) error {
			e := &alertingv1.EmailChannel{Host: "smtp.invalid", Port: 587, From: "cron@example.test", To: []string{"ops@example.test"}}
			edit(e)
			_, err := c.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{
				Channel: &alertingv1.Channel{DisplayName: "mail", Kind: &alertingv1.Channel_Email{Email: e}},
			}))
			return err
		}
	}
	manyLabels := make(map[string]string, 65)
	for i := range 65 {
		manyLabels[fmt.Sprintf("k%d", i)] = "v"
	}
	tests := []struct {
		name  string
		call  func(context.Context, alertingv1connect.AlertServiceClient) error
		field string
	}{
		{"selector job id", rule(func(r *alertingv1.Rule) {
			r.Selector = &alertingv1.JobSelector{JobIds: []string{tooLong}}
		}), "rule.selector.job_ids[0]"},
		{"selector label count", rule(func(r *alertingv1.Rule) {
			r.Selector = &alertingv1.JobSelector{Labels: manyLabels}
		}), "rule.selector.labels"},
		{"selector label value", rule(func(r *alertingv1.Rule) {
			r.Selector = &alertingv1.JobSelector{Labels: map[string]string{"team": tooLong}}
		}), `rule.selector.labels["team"]`},
		{"webhook url", func(ctx context.Context, c alertingv1connect.AlertServiceClient) error {
			_, err := c.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{
				Channel: webhookChannel("https://hooks.invalid/" + tooLong),
			}))
			return err
		}, "channel.webhook.url"},
		{"webhook secret", func(ctx context.Context, c alertingv1connect.AlertServiceClient) error {
			ch := webhookChannel("https://hooks.invalid/x")
			ch.GetWebhook().SigningSecret = "whsec_" + tooLong
			_, err := c.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: ch}))
			return err
		}, "channel.webhook.signing_secret"},
		{"email host", email(func(e *alertingv1.EmailChannel) { e.Host = tooLong }), "channel.email.host"},
		{"email username", email(func(e *alertingv1.EmailChannel) { e.Username = tooLong }), "channel.email.username"},
		{"email password", email(func(e *alertingv1.EmailChannel) { e.Username, e.Password = "u", tooLong }), "channel.email.password"},
		{"email from", email(func(e *alertingv1.EmailChannel) { e.From = tooLong + "@example.test" }), "channel.email.from"},
		{"email to", email(func(e *alertingv1.EmailChannel) { e.To = []string{tooLong + "@example.test"} }), "channel.email.to[0]"},
		{"get rule id", func(ctx context.Context, c alertingv1connect.AlertServiceClient) error {
			_, err := c.GetRule(ctx, connect.NewRequest(&alertingv1.GetRuleRequest{Id: tooLong}))
			return err
		}, "id"},
		{"delete channel id", func(ctx context.Context, c alertingv1connect.AlertServiceClient) error {
			_, err := c.DeleteChannel(ctx, connect.NewRequest(&alertingv1.DeleteChannelRequest{Id: tooLong}))
			return err
		}, "id"},
		{"test channel id", func(ctx context.Context, c alertingv1connect.AlertServiceClient) error {
			_, err := c.TestChannel(ctx, connect.NewRequest(&alertingv1.TestChannelRequest{Id: tooLong}))
			return err
		}, "id"},
		{"acknowledge incident id", func(ctx context.Context, c alertingv1connect.AlertServiceClient) error {
			_, err := c.AcknowledgeIncident(ctx, connect.NewRequest(&alertingv1.AcknowledgeIncidentRequest{Id: tooLong}))
			return err
		}, "id"},
		{"list rules page token", func(ctx context.Context, c alertingv1connect.AlertServiceClient) error {
			_, err := c.ListRules(ctx, connect.NewRequest(&alertingv1.ListRulesRequest{PageToken: tooLong}))
			return err
		}, "page_token"},
		{"list incidents job id", func(ctx context.Context, c alertingv1connect.AlertServiceClient) error {
			_, err := c.ListIncidents(ctx, connect.NewRequest(&alertingv1.ListIncidentsRequest{JobId: tooLong}))
			return err
		}, "job_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Contains(t, rpctest.Violations(t, tt.call(t.Context(), c)), tt.field)
		})
	}
}
