// Package tlsconfig builds the crypto/tls configurations of cronmesh from PEM
// files: a listener's (Server: certificate, key and, for mutual TLS, the CA
// its clients' certificates must chain to) and a caller's (Client: the CA the
// server's certificate must chain to and, for mutual TLS, its own
// certificate and key).
//
// Certificates are read when the configuration is built, so a missing or
// malformed file stops a service at start, and read again when the
// certificate or key file's modification time changes (checked at each
// handshake), so a renewed certificate (cert-manager rewriting a mounted
// Secret, for instance) is served without a restart. While a rewrite is
// half done (the certificate written, not yet its key) the previous pair
// keeps being used. CA files are read once: changing a CA is a restart.
//
// Both sides require TLS 1.2 or later.
package tlsconfig
