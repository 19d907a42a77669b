package apikey

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"connectrpc.com/authn"
)

// namespacePattern is what a namespace may look like: it appears in queue
// names, metrics and URLs, so it is kept to a safe alphabet.
var namespacePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// minKeyLength keeps out keys short enough to guess.
const minKeyLength = 16

// Keys maps the SHA-256 digest of each accepted key to its namespace and
// role.
type Keys struct {
	byDigest map[[sha256.Size]byte]grant
}

// grant is what a configured key is allowed.
type grant struct {
	namespace string
	role      Role
}

// Parse builds Keys from entries of the form "namespace=key" or
// "namespace=sha256:<64 hex digits>", which make the key its namespace's
// admin, or "namespace:role=..." with role admin, editor or viewer. Several
// keys may share a namespace; one key may not map to two namespaces or two
// roles. Errors never contain the key.
func Parse(entries []string) (*Keys, error) {
	keys := &Keys{byDigest: make(map[[sha256.Size]byte]grant, len(entries))}
	for i, entry := range entries {
		who, secret, ok := strings.Cut(strings.TrimSpace(entry), "=")
		if !ok {
			return nil, fmt.Errorf("api key %d: want namespace=key", i+1)
		}
		namespace, roleName, hasRole := strings.Cut(who, ":")
		role := RoleAdmin
		if hasRole {
			role = Role(roleName)
			if role != RoleAdmin && role != RoleEditor && role != RoleViewer {
				return nil, fmt.Errorf("api key %d: role %q must be admin, editor or viewer", i+1, roleName)
			}
		}
		if !namespacePattern.MatchString(namespace) {
			return nil, fmt.Errorf("api key %d: namespace %q must be 1-63 characters of [a-z0-9-]", i+1, namespace)
		}
		var digest [sha256.Size]byte
		if hexDigest, ok := strings.CutPrefix(secret, "sha256:"); ok {
			raw, err := hex.DecodeString(hexDigest)
			if err != nil || len(raw) != sha256.Size {
				return nil, fmt.Errorf("api key %d: sha256: wants 64 hex digits", i+1)
			}
			copy(digest[:], raw)
		} else {
			if len(secret) < minKeyLength {
				return nil, fmt.Errorf("api key %d: a key must be at least %d characters", i+1, minKeyLength)
			}
			digest = sha256.Sum256([]byte(secret))
		}
		if other, dup := keys.byDigest[digest]; dup && other.namespace != namespace {
			return nil, fmt.Errorf("api key %d: the same key is configured for namespaces %q and %q", i+1, other.namespace, namespace)
		} else if dup && other.role != role {
			return nil, fmt.Errorf("api key %d: the same key is configured as %s and %s of %q", i+1, other.role, role, namespace)
		}
		keys.byDigest[digest] = grant{namespace: namespace, role: role}
	}
	return keys, nil
}

// Len is the number of distinct keys.
func (k *Keys) Len() int { return len(k.byDigest) }

// Principal returns who key is: its namespace, its id and its role. Looking
// up a digest rather than comparing keys keeps the time taken independent
// of how much of a wrong key matches a right one. The authentication
// middleware of every service is keyring's, which asks this first.
func (k *Keys) Principal(key string) (Principal, bool) {
	g, ok := k.byDigest[sha256.Sum256([]byte(key))]
	if !ok {
		return Principal{}, false
	}
	return Principal{Namespace: g.namespace, KeyID: ConfiguredKeyID(key), Role: g.role}, true
}

// Role is what a key may do in its namespace.
type Role string

// The roles, from the most to the least powerful.
const (
	// RoleAdmin may do everything, including managing keys and the
	// cluster-level RPCs (the ring).
	RoleAdmin Role = "admin"
	// RoleEditor may read and change jobs, rules, channels and dead
	// letters, redrive and backfill.
	RoleEditor Role = "editor"
	// RoleViewer may only read.
	RoleViewer Role = "viewer"
)

// Principal is what an authenticated request carries.
type Principal struct {
	Namespace string
	// KeyID names the key that made the request, never its secret: audit
	// records and per-key rate limits are keyed on it.
	KeyID string
	Role  Role
}

// ConfiguredKeyID is the id of a key given in configuration: "cfg-" and the
// first 12 hex digits of its SHA-256 digest, stable across restarts and
// services, and useless for guessing the key.
func ConfiguredKeyID(key string) string {
	digest := sha256.Sum256([]byte(key))
	return configuredKeyIDPrefix + hex.EncodeToString(digest[:6])
}

// PrincipalFrom returns the authenticated caller, and false when the
// request did not pass through Middleware.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := authn.GetInfo(ctx).(Principal)
	if !ok || p.Namespace == "" {
		return Principal{}, false
	}
	return p, true
}

// NamespaceFrom returns the namespace of the authenticated caller, and false
// when the request did not pass through Middleware (a wiring bug: handlers
// must then refuse the call rather than guess a namespace).
func NamespaceFrom(ctx context.Context) (string, bool) {
	p, ok := PrincipalFrom(ctx)
	return p.Namespace, ok
}

// WithNamespace returns a context that NamespaceFrom reads as authenticated
// for namespace; for tests and in-process callers that bypass HTTP.
func WithNamespace(ctx context.Context, namespace string) context.Context {
	return WithPrincipal(ctx, Principal{Namespace: namespace, KeyID: "test", Role: RoleAdmin})
}

// WithPrincipal returns a context that PrincipalFrom reads as the
// authenticated caller p; for tests and in-process callers that bypass HTTP.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return authn.SetInfo(ctx, p)
}
