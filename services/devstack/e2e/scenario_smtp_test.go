package e2e_test

import (
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// email is one message the SMTP server accepted.
type email struct {
	From, Subject, Body string
	To                  []string
	Header              mail.Header
}

// smtpServer is a real SMTP server (github.com/emersion/go-smtp) on
// loopback, requiring AUTH PLAIN, that records what it accepts: the
// approach of services/alerting/internal/smtptest, which this package
// cannot import. The mesh's alerting process talks real SMTP to it.
type smtpServer struct {
	Host               string
	Port               int
	Username, Password string

	mu       sync.Mutex
	messages []email
}

func startSMTP(t testing.TB) *smtpServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(l.Addr().String())
	s := &smtpServer{Host: host, Username: "alerts", Password: "scenario-smtp-password"}
	s.Port, _ = strconv.Atoi(port)
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &smtpSession{s: s}, nil }))
	srv.Domain = "localhost"
	srv.AllowInsecureAuth = true // loopback, no TLS: the channel says SMTP_SECURITY_NONE
	srv.ReadTimeout, srv.WriteTimeout = 10*time.Second, 10*time.Second
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

// Messages returns the accepted messages, in order.
func (s *smtpServer) Messages() []email {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]email(nil), s.messages...)
}

type smtpSession struct {
	s      *smtpServer
	authed bool
	from   string
	to     []string
}

func (x *smtpSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (x *smtpSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, username, password string) error {
		if username != x.s.Username || password != x.s.Password {
			return errors.New("invalid credentials")
		}
		x.authed = true
		return nil
	}), nil
}

func (x *smtpSession) Mail(from string, _ *smtp.MailOptions) error {
	if !x.authed {
		return smtp.ErrAuthRequired
	}
	x.from = from
	return nil
}

func (x *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	x.to = append(x.to, to)
	return nil
}

func (x *smtpSession) Data(r io.Reader) error {
	msg, err := mail.ReadMessage(r)
	if err != nil {
		return err
	}
	var body io.Reader = msg.Body
	switch strings.ToLower(msg.Header.Get("Content-Transfer-Encoding")) {
	case "quoted-printable":
		body = quotedprintable.NewReader(msg.Body)
	case "base64":
		body = base64.NewDecoder(base64.StdEncoding, msg.Body)
	}
	text, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	if err != nil {
		subject = msg.Header.Get("Subject")
	}
	x.s.mu.Lock()
	x.s.messages = append(x.s.messages, email{
		From: x.from, To: append([]string(nil), x.to...), Subject: subject, Header: msg.Header,
		Body: strings.ReplaceAll(string(text), "\r\n", "\n"),
	})
	x.s.mu.Unlock()
	return nil
}

func (x *smtpSession) Reset()        { x.from, x.to = "", nil }
func (x *smtpSession) Logout() error { return nil }
