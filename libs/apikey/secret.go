package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// SecretPrefix starts every secret the registry issues, so that a leaked one
// is recognisable (by people and by secret scanners) for what it is.
const SecretPrefix = "cm_"

// secretBytes is the entropy of an issued secret: 256 bits, beyond guessing
// and beyond inverting its SHA-256 digest.
const secretBytes = 32

// NewSecret returns a fresh secret (SecretPrefix and 32 random bytes in
// unpadded base64url, 46 characters) and its SHA-256 digest, which is all
// the registry stores.
func NewSecret() (string, [sha256.Size]byte) {
	raw := make([]byte, secretBytes)
	// crypto/rand.Read never fails on the platforms Go supports; it panics
	// rather than return weak bytes.
	_, _ = rand.Read(raw)
	secret := SecretPrefix + base64.RawURLEncoding.EncodeToString(raw)
	return secret, Digest(secret)
}

// Digest returns the SHA-256 digest under which a secret is stored and
// looked up.
func Digest(secret string) [sha256.Size]byte {
	return sha256.Sum256([]byte(secret))
}

// IsConfiguredKeyID reports whether id names a key given in configuration
// (see ConfiguredKeyID) rather than one managed through the registry's
// KeyService: only those may read every namespace's key digests.
func IsConfiguredKeyID(id string) bool {
	return strings.HasPrefix(id, configuredKeyIDPrefix)
}

const configuredKeyIDPrefix = "cfg-"
