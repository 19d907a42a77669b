// Package smtptest runs a real SMTP server (github.com/emersion/go-smtp) on
// loopback inside a test process, with AUTH PLAIN, and records the messages
// it accepts, so tests assert what an email channel actually sent. It can
// be taken down and brought back on the same port to test retries, and can
// speak STARTTLS or implicit TLS with a certificate of its own.
package smtptest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"io"
	"math/big"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Message is one accepted email.
type Message struct {
	From    string
	To      []string
	Subject string
	Header  mail.Header
	Body    string
}

// Server is a test SMTP server.
type Server struct {
	// Username and Password are the credentials AUTH PLAIN accepts.
	Username, Password string

	t        testing.TB
	addr     string
	security Security
	tls      *tls.Config
	roots    *x509.CertPool

	mu       sync.Mutex
	messages []Message
	srv      *smtp.Server
}

// Security is how a test server uses TLS.
type Security int

const (
	// Plain never speaks TLS.
	Plain Security = iota
	// StartTLS offers STARTTLS.
	StartTLS
	// ImplicitTLS speaks TLS from the first byte (SMTPS, port 465 in
	// production).
	ImplicitTLS
)

// Start listens on a free loopback port without TLS and serves until the
// test ends.
func Start(t testing.TB) *Server { return StartSecure(t, Plain) }

// StartSecure is Start with TLS as security says, on a self-signed
// certificate for 127.0.0.1 and localhost that RootCAs trusts.
func StartSecure(t testing.TB, security Security) *Server {
	t.Helper()
	s := &Server{t: t, Username: "alerts", Password: "s3cret-smtp-password", security: security}
	if security != Plain {
		cert, roots, err := selfSigned()
		if err != nil {
			t.Fatalf("smtptest: certificate: %v", err)
		}
		s.tls, s.roots = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, roots
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("smtptest: listen: %v", err)
	}
	s.addr = l.Addr().String()
	s.serve(l)
	t.Cleanup(func() { s.Stop() })
	return s
}

// RootCAs trusts the server's certificate; nil for a Plain server.
func (s *Server) RootCAs() *x509.CertPool { return s.roots }

// selfSigned makes a certificate for 127.0.0.1 and localhost, valid for a
// day, and a pool that trusts it.
func selfSigned() (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "smtptest"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, roots, nil
}

func (s *Server) serve(l net.Listener) {
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &session{s: s}, nil }))
	srv.Domain = "localhost"
	srv.AllowInsecureAuth = true
	srv.ReadTimeout, srv.WriteTimeout = 10*time.Second, 10*time.Second
	switch s.security {
	case StartTLS:
		srv.TLSConfig = s.tls
	case ImplicitTLS:
		l = tls.NewListener(l, s.tls)
	}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
}

// Host and Port are where the server listens.
func (s *Server) Host() string { h, _, _ := net.SplitHostPort(s.addr); return h }

// Port is the server's port.
func (s *Server) Port() int {
	_, p, _ := net.SplitHostPort(s.addr)
	n := 0
	for _, c := range p {
		n = n*10 + int(c-'0')
	}
	return n
}

// Stop closes the listener: connections are refused until Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// Restart listens again on the same port.
func (s *Server) Restart() {
	s.t.Helper()
	var l net.Listener
	var err error
	for range 50 { // the port may linger briefly after Close
		if l, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("smtptest: listen again on %s: %v", s.addr, err)
	}
	s.serve(l)
}

// Messages returns a copy of the accepted messages, in order.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.messages...)
}

type session struct {
	s      *Server
	authed bool
	from   string
	to     []string
}

func (x *session) AuthMechanisms() []string { return []string{sasl.Plain} }

func (x *session) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, username, password string) error {
		if username != x.s.Username || password != x.s.Password {
			return errors.New("invalid credentials")
		}
		x.authed = true
		return nil
	}), nil
}

func (x *session) Mail(from string, _ *smtp.MailOptions) error {
	if !x.authed {
		return smtp.ErrAuthRequired
	}
	x.from = from
	return nil
}

func (x *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	x.to = append(x.to, to)
	return nil
}

func (x *session) Data(r io.Reader) error {
	msg, err := mail.ReadMessage(r)
	if err != nil {
		return err
	}
	var bodyReader io.Reader = msg.Body
	switch strings.ToLower(msg.Header.Get("Content-Transfer-Encoding")) {
	case "quoted-printable":
		bodyReader = quotedprintable.NewReader(msg.Body)
	case "base64":
		bodyReader = base64.NewDecoder(base64.StdEncoding, msg.Body)
	}
	body, err := io.ReadAll(bodyReader)
	if err != nil {
		return err
	}
	dec := new(mime.WordDecoder)
	subject, err := dec.DecodeHeader(msg.Header.Get("Subject"))
	if err != nil {
		subject = msg.Header.Get("Subject")
	}
	x.s.mu.Lock()
	x.s.messages = append(x.s.messages, Message{
		From: x.from, To: append([]string(nil), x.to...), Subject: subject, Header: msg.Header,
		Body: strings.ReplaceAll(string(body), "\r\n", "\n"),
	})
	x.s.mu.Unlock()
	return nil
}

func (x *session) Reset()        { x.from, x.to = "", nil }
func (x *session) Logout() error { return nil }
