package notify_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	"github.com/cronmesh/cronmesh/libs/testkit/smtptest"
	"github.com/cronmesh/cronmesh/services/alerting/internal/notify"
	"github.com/cronmesh/cronmesh/services/alerting/internal/payload"
	"github.com/cronmesh/cronmesh/services/alerting/internal/store"
)

// secret is a valid Standard Webhooks secret (the specification's vector).
const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func TestWebhookSSRFGuard(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	ch := &store.Channel{
		Def:    &alertingv1.Channel{Kind: &alertingv1.Channel_Webhook{Webhook: &alertingv1.WebhookChannel{Url: srv.URL + "/hook"}}},
		Secret: secret,
	}
	body, err := json.Marshal(&payload.Payload{Type: "channel.test", NotificationID: "ntf_1"})
	require.NoError(t, err)

	// By default a webhook to a loopback address is refused before any
	// connection: a tenant must not reach the cluster's own services.
	guarded := notify.NewSender(notify.SenderOptions{})
	err = guarded.Send(context.Background(), ch, "ntf_1", body)
	require.ErrorContains(t, err, "target refused")
	require.ErrorContains(t, err, "loopback")
	require.Zero(t, hits.Load(), "the receiver saw nothing")

	// An allow-list opens it (tests, local development).
	open := notify.NewSender(notify.SenderOptions{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	require.NoError(t, open.Send(context.Background(), ch, "ntf_1", body))
	require.Equal(t, int32(1), hits.Load())
}

func TestWebhookErrorsShowOnlySchemeAndHost(t *testing.T) {
	t.Parallel()
	body, err := json.Marshal(&payload.Payload{Type: "channel.test", NotificationID: "ntf_3"})
	require.NoError(t, err)
	s := notify.NewSender(notify.SenderOptions{})
	for _, url := range []string{
		"http://127.0.0.1:9/services/T000/B000/capability-s3cret?token=s3cret", // refused by the guard
		"http://127.0.0.1:9/services/capability-s3cret\x7f?token=s3cret",       // not even a valid request
	} {
		ch := &store.Channel{
			Def:    &alertingv1.Channel{Kind: &alertingv1.Channel_Webhook{Webhook: &alertingv1.WebhookChannel{Url: url}}},
			Secret: secret,
		}
		err := s.Send(context.Background(), ch, "ntf_3", body)
		require.Error(t, err)
		require.NotContains(t, err.Error(), "s3cret", "a capability URL's path or query is the credential")
	}
}

func TestWebhookRedirectIsAFailure(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	ch := &store.Channel{
		Def:    &alertingv1.Channel{Kind: &alertingv1.Channel_Webhook{Webhook: &alertingv1.WebhookChannel{Url: srv.URL}}},
		Secret: secret,
	}
	body, err := json.Marshal(&payload.Payload{Type: "channel.test", NotificationID: "ntf_2"})
	require.NoError(t, err)
	s := notify.NewSender(notify.SenderOptions{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	require.ErrorContains(t, s.Send(context.Background(), ch, "ntf_2", body), "HTTP 302")
}

// emailChannel is an email channel to srv with the given security, and a
// test notification's body.
func emailChannel(t *testing.T, srv *smtptest.Server, security alertingv1.SmtpSecurity) (*store.Channel, []byte) {
	t.Helper()
	ch := &store.Channel{
		Def: &alertingv1.Channel{Kind: &alertingv1.Channel_Email{Email: &alertingv1.EmailChannel{
			Host: srv.Host(), Port: int32(srv.Port()), Security: security,
			Username: srv.Username, From: "cronmesh@example.com", To: []string{"oncall@example.com"},
		}}},
		Secret: srv.Password,
	}
	body, err := json.Marshal(&payload.Payload{Type: "channel.test", NotificationID: "ntf_3"})
	require.NoError(t, err)
	return ch, body
}

func TestEmailThroughTheSSRFGuardInEverySecurityMode(t *testing.T) {
	t.Parallel()
	modes := []struct {
		name     string
		server   smtptest.Security
		security alertingv1.SmtpSecurity
	}{
		{"starttls", smtptest.StartTLS, alertingv1.SmtpSecurity_SMTP_SECURITY_STARTTLS},
		{"implicit tls", smtptest.ImplicitTLS, alertingv1.SmtpSecurity_SMTP_SECURITY_TLS},
		{"none", smtptest.Plain, alertingv1.SmtpSecurity_SMTP_SECURITY_NONE},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			srv := smtptest.StartSecure(t, m.server)
			ch, body := emailChannel(t, srv, m.security)

			// A tenant's SMTP host on loopback is refused before any
			// connection, as a webhook's would be.
			guarded := notify.NewSender(notify.SenderOptions{RootCAs: srv.RootCAs()})
			err := guarded.Send(context.Background(), ch, "ntf_3", body)
			require.ErrorContains(t, err, "target refused")
			require.ErrorContains(t, err, "loopback")
			require.Empty(t, srv.Messages())

			open := notify.NewSender(notify.SenderOptions{
				AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, RootCAs: srv.RootCAs(),
			})
			require.NoError(t, open.Send(context.Background(), ch, "ntf_3", body))
			msgs := srv.Messages()
			require.Len(t, msgs, 1)
			require.Equal(t, []string{"oncall@example.com"}, msgs[0].To)
		})
	}
}

func TestEmailImplicitTLSVerifiesTheCertificate(t *testing.T) {
	t.Parallel()
	srv := smtptest.StartSecure(t, smtptest.ImplicitTLS)
	ch, body := emailChannel(t, srv, alertingv1.SmtpSecurity_SMTP_SECURITY_TLS)
	// Without the server's CA: the handshake we make on the guarded
	// connection must verify the certificate, as go-mail's would.
	s := notify.NewSender(notify.SenderOptions{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	require.ErrorContains(t, s.Send(context.Background(), ch, "ntf_3", body), "certificate")
	require.Empty(t, srv.Messages())
}
