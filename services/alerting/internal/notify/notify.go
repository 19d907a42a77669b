// Package notify delivers notifications: a signed webhook POST or an email
// over SMTP (through github.com/wneessen/go-mail), and the sender loop that
// drains the notification outbox with exponential backoff, so a channel
// that is down delays an alert but never loses it.
package notify

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	neturl "net/url"
	"time"

	"github.com/wneessen/go-mail"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/redact"
	"github.com/cronmesh/cronmesh/libs/ssrfguard"
	"github.com/cronmesh/cronmesh/libs/webhooksign"
	"github.com/cronmesh/cronmesh/services/alerting/internal/payload"
	"github.com/cronmesh/cronmesh/services/alerting/internal/store"
)

// DefaultTimeout bounds one delivery attempt (HTTP request or SMTP
// session).
const DefaultTimeout = 15 * time.Second

// Sender sends one notification through one channel.
type Sender struct {
	client  *http.Client
	dial    mail.DialContextFunc // SMTP connections, through the SSRF guard
	roots   *x509.CertPool
	timeout time.Duration
	clock   clock.Clock
	helo    string
}

// SenderOptions for NewSender.
type SenderOptions struct {
	// HTTPClient posts webhooks. Default: a client with Timeout that dials
	// through the SSRF guard (libs/ssrfguard) and follows no redirects.
	HTTPClient *http.Client
	// AllowedNetworks open the SSRF guard of the default HTTP client and of
	// every SMTP connection for these networks (tests and local development
	// allow loopback). A channel's URL or SMTP host is set by whoever holds
	// the namespace's API key, so without the guard a tenant could make
	// alerting post to the cluster's internal services or the cloud
	// metadata endpoint, or talk SMTP at any internal port.
	AllowedNetworks []netip.Prefix
	// RootCAs verify SMTP servers' certificates. Default: the system's
	// (tests and private CAs set it).
	RootCAs *x509.CertPool
	// Timeout bounds one attempt. Default DefaultTimeout.
	Timeout time.Duration
	// Clock stamps webhook-timestamp. Default clock.Real.
	Clock clock.Clock
	// HELO is the name this host gives SMTP servers. Default "localhost"
	// (go-mail's default, the OS hostname, may not be a valid one).
	HELO string
}

// NewSender returns a Sender.
func NewSender(opts SenderOptions) *Sender {
	timeout := cmp.Or(opts.Timeout, DefaultTimeout)
	dialer := &net.Dialer{Timeout: timeout, ControlContext: ssrfguard.Guard{Allowed: opts.AllowedNetworks}.Control}
	client := opts.HTTPClient
	if client == nil {
		client = &http.Client{
			Timeout: timeout,
			// No proxy: a proxy would connect past the guard.
			Transport: &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute},
			// A redirect is the receiver's answer, not a new destination:
			// a 3xx counts as a failed delivery.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	var clk clock.Clock = clock.Real{}
	if opts.Clock != nil {
		clk = opts.Clock
	}
	return &Sender{client: client, dial: dialer.DialContext, roots: opts.RootCAs, timeout: timeout, clock: clk, helo: cmp.Or(opts.HELO, "localhost")}
}

// Send delivers one notification: id is its stable webhook-id, body its
// JSON payload. An error means not delivered (retry later).
func (s *Sender) Send(ctx context.Context, ch *store.Channel, id string, body []byte) error {
	var p payload.Payload
	if err := json.Unmarshal(body, &p); err != nil {
		return fmt.Errorf("decode payload: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	switch k := ch.Def.GetKind().(type) {
	case *alertingv1.Channel_Webhook:
		return s.webhook(ctx, k.Webhook.GetUrl(), ch.Secret, id, body)
	case *alertingv1.Channel_Email:
		return s.email(ctx, k.Email, ch.Secret, id, &p)
	default:
		return errors.New("unknown channel kind")
	}
}

// Test sends a test notification.
func (s *Sender) Test(ctx context.Context, ch *store.Channel) error {
	id := "test_" + fmt.Sprint(s.clock.Now().UnixNano())
	body, err := json.Marshal(&payload.Payload{Type: "channel.test", NotificationID: id})
	if err != nil {
		return err
	}
	return s.Send(ctx, ch, id, body)
}

func (s *Sender) webhook(ctx context.Context, url, secret, id string, body []byte) error {
	now := s.clock.Now()
	sig, err := webhooksign.Sign(secret, id, now, body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("webhook request: %w", redact.URLError(err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "cronmesh-alerting")
	req.Header.Set(webhooksign.HeaderWebhookID, id)
	req.Header.Set(webhooksign.HeaderWebhookTimestamp, fmt.Sprint(now.Unix()))
	req.Header.Set(webhooksign.HeaderWebhookSignature, sig)
	resp, err := s.client.Do(req)
	if err != nil {
		// *url.Error repeats the whole URL, whose path or query is often
		// the receiver's secret (many webhook URLs are capability URLs):
		// keep only the scheme and host in what is logged and returned.
		var uerr *neturl.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fmt.Errorf("webhook to %s: %w", redact.URL(req.URL), err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook: HTTP %d", resp.StatusCode)
	}
	return nil
}

func (s *Sender) email(ctx context.Context, e *alertingv1.EmailChannel, password, id string, p *payload.Payload) error {
	msg := mail.NewMsg()
	if err := msg.From(e.GetFrom()); err != nil {
		return fmt.Errorf("email from: %w", err)
	}
	if err := msg.To(e.GetTo()...); err != nil {
		return fmt.Errorf("email to: %w", err)
	}
	msg.Subject(p.Subject())
	msg.SetBodyString(mail.TypeTextPlain, p.Text())
	// A stable Message-ID per notification lets mail clients fold the
	// duplicates an at-least-once retry can produce.
	msg.SetMessageIDWithValue(id + "@cronmesh")
	msg.SetGenHeader("X-Cronmesh-Notification-Id", id)

	// Every connection goes through the SSRF guard's dialer: go-mail's own
	// dialer would connect wherever the channel's host resolves.
	tlsConfig := &tls.Config{ServerName: e.GetHost(), RootCAs: s.roots, MinVersion: tls.VersionTLS12}
	opts := []mail.Option{
		mail.WithPort(int(e.GetPort())),
		mail.WithTimeout(s.timeout),
		mail.WithHELO(s.helo),
		mail.WithTLSConfig(tlsConfig),
		mail.WithDialContextFunc(s.dial),
	}
	switch e.GetSecurity() {
	case alertingv1.SmtpSecurity_SMTP_SECURITY_TLS:
		// Implicit TLS, done here on the guarded connection: go-mail's
		// WithSSL is ignored once the dialer is ours. With the connection
		// already encrypted, the opportunistic policy makes go-mail read its
		// TLS state (so that authentication knows it is encrypted) without
		// asking for STARTTLS, which an implicit-TLS server does not offer.
		opts = append(opts, mail.WithTLSPolicy(mail.TLSOpportunistic), mail.WithDialContextFunc(
			func(ctx context.Context, network, address string) (net.Conn, error) {
				conn, err := s.dial(ctx, network, address)
				if err != nil {
					return nil, err
				}
				tlsConn := tls.Client(conn, tlsConfig)
				if err := tlsConn.HandshakeContext(ctx); err != nil {
					_ = conn.Close()
					return nil, err
				}
				return tlsConn, nil
			}))
	case alertingv1.SmtpSecurity_SMTP_SECURITY_NONE:
		opts = append(opts, mail.WithTLSPolicy(mail.NoTLS))
	default:
		opts = append(opts, mail.WithTLSPolicy(mail.TLSMandatory))
	}
	if e.GetUsername() != "" {
		// Over TLS, the strongest mechanism the server offers. Without TLS,
		// go-mail's discovery (rightly) refuses the plain-text mechanisms;
		// PLAIN is then used explicitly, and go-mail still sends it in the
		// clear only to a loopback server (a local relay).
		auth := mail.SMTPAuthAutoDiscover
		if e.GetSecurity() == alertingv1.SmtpSecurity_SMTP_SECURITY_NONE {
			auth = mail.SMTPAuthPlain
		}
		opts = append(opts, mail.WithSMTPAuth(auth), mail.WithUsername(e.GetUsername()), mail.WithPassword(password))
	}
	client, err := mail.NewClient(e.GetHost(), opts...)
	if err != nil {
		return fmt.Errorf("smtp client: %w", err)
	}
	if err := client.DialAndSendWithContext(ctx, msg); err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	return nil
}
