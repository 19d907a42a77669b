package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// ErrIncompletePair is returned when only one of a certificate file and its
// key file is given: each is useless without the other.
var ErrIncompletePair = errors.New("a certificate file and its key file go together: only one was given")

// ErrClientCAWithoutCert is returned when a Server has a client CA but no
// certificate: client certificates can only be asked for over TLS.
var ErrClientCAWithoutCert = errors.New("a client CA needs the server's own certificate and key")

// Server names the PEM files of a listener's TLS. The zero value is no TLS.
type Server struct {
	// CertFile is the server's certificate chain, leaf first.
	CertFile string
	// KeyFile is the certificate's private key.
	KeyFile string
	// ClientCAFile, when set, holds the CA certificates clients'
	// certificates must chain to (mutual TLS).
	ClientCAFile string
}

// Enabled reports whether any file is named, that is whether the listener is
// meant to serve TLS (Validate then says whether the files make sense).
func (s Server) Enabled() bool {
	return s.CertFile != "" || s.KeyFile != "" || s.ClientCAFile != ""
}

// Validate checks which files are named, without reading them: a
// certificate needs its key and the other way round (ErrIncompletePair), and
// a client CA needs both (ErrClientCAWithoutCert). The zero Server is valid.
func (s Server) Validate() error {
	if (s.CertFile == "") != (s.KeyFile == "") {
		return ErrIncompletePair
	}
	if s.ClientCAFile != "" && s.CertFile == "" {
		return ErrClientCAWithoutCert
	}
	return nil
}

// Config returns the listener's tls.Config, or nil when s is the zero
// Server. With a client CA, clients must present a certificate that chains to
// it (tls.RequireAndVerifyClientCert). It fails when s is not valid or a
// file cannot be read or parsed. NextProtos is left empty: http.Server fills
// it from its Protocols.
func (s Server) Config() (*tls.Config, error) {
	if !s.Enabled() {
		return nil, nil
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	pair, err := newKeyPair(s.CertFile, s.KeyFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return pair.certificate()
		},
	}
	if s.ClientCAFile != "" {
		if cfg.ClientCAs, err = loadPool(s.ClientCAFile); err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Client names the PEM files a caller uses to reach a TLS server. The zero
// value trusts the system's CAs and presents no certificate.
type Client struct {
	// CAFile, when set, holds the only CA certificates the server's
	// certificate may chain to (instead of the system's).
	CAFile string
	// CertFile and KeyFile, when set, are the certificate and key presented
	// to a server that asks for one (mutual TLS).
	CertFile string
	KeyFile  string
}

// Validate checks which files are named, without reading them: a
// certificate needs its key and the other way round (ErrIncompletePair).
func (c Client) Validate() error {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return ErrIncompletePair
	}
	return nil
}

// Config returns the caller's tls.Config: the system's CAs or CAFile's, and
// the client certificate when named. It never returns nil on success, so the
// result can be handed to clients that take TLS only when the config is
// non-nil (etcd's). It fails when c is not valid or a file cannot be read or
// parsed.
func (c Client) Config() (*tls.Config, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pool, err := loadPool(c.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" {
		pair, err := newKeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return pair.certificate()
		}
	}
	return cfg, nil
}

// loadPool reads the PEM CA certificates of path into a new pool.
func loadPool(path string) (*x509.CertPool, error) {
	pemBytes, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("CA file %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// keyPair is a certificate and key read from files, read again when either
// file's modification time changes.
type keyPair struct {
	certFile, keyFile string

	mu              sync.Mutex
	cert            *tls.Certificate
	certMod, keyMod time.Time
	timesKnown      bool // certMod and keyMod are the times of the files read
}

func newKeyPair(certFile, keyFile string) (*keyPair, error) {
	k := &keyPair{certFile: certFile, keyFile: keyFile}
	if _, err := k.certificate(); err != nil {
		return nil, err
	}
	return k, nil
}

// certificate returns the current pair, reading the files again first if
// they changed since the last read. If the new files do not make a valid
// pair (a rewrite half done), the previous pair is returned; the files are
// tried again at the next call.
func (k *keyPair) certificate() (*tls.Certificate, error) {
	certMod, keyMod, statErr := modTimes(k.certFile, k.keyFile)
	k.mu.Lock()
	defer k.mu.Unlock()
	if statErr == nil && k.timesKnown && certMod.Equal(k.certMod) && keyMod.Equal(k.keyMod) {
		return k.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		if k.cert != nil {
			return k.cert, nil
		}
		return nil, fmt.Errorf("load certificate %s and key %s: %w", k.certFile, k.keyFile, err)
	}
	k.cert, k.certMod, k.keyMod, k.timesKnown = &cert, certMod, keyMod, statErr == nil
	return k.cert, nil
}

func modTimes(certFile, keyFile string) (certMod, keyMod time.Time, err error) {
	ci, err := os.Stat(certFile)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	ki, err := os.Stat(keyFile)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	return ci.ModTime(), ki.ModTime(), nil
}
