package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/types/known/timestamppb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/keyring"
)

// Domain errors of the keys; the API maps them to Connect codes.
var (
	// ErrKeyNotFound: no key with that id in the caller's namespace.
	ErrKeyNotFound = errors.New("key not found")
	// ErrKeyNameTaken: another unrevoked key of the namespace has the name.
	ErrKeyNameTaken = errors.New("an unrevoked key of the namespace already has this name")
	// ErrKeyRevoked: a revoked key cannot be rotated.
	ErrKeyRevoked = errors.New("key is revoked")
	// ErrTooManyKeys: the namespace has MaxKeysPerNamespace unrevoked keys.
	ErrTooManyKeys = fmt.Errorf("a namespace has at most %d unrevoked keys: revoke one first", MaxKeysPerNamespace)
	// ErrTooManySecrets: the key has MaxSecretsPerKey valid secrets.
	ErrTooManySecrets = fmt.Errorf("a key has at most %d valid secrets: wait for a grace period to end, or rotate with a zero grace period", MaxSecretsPerKey)
)

// Limits on the managed keys. Every service holds every valid secret's
// digest in memory, so a tenant must not be able to grow that set without
// bound.
const (
	// MaxKeysPerNamespace bounds a namespace's unrevoked keys.
	MaxKeysPerNamespace = 1000
	// MaxSecretsPerKey bounds a key's valid secrets: the current one and
	// those still in their grace period.
	MaxSecretsPerKey = 10
)

// NewKey is a validated key to insert.
type NewKey struct {
	Namespace string
	Name      string
	Role      apikey.Role
	// RequestID makes the creation idempotent; "" for none.
	RequestID string
	// CreatedBy is the id of the key that made the call.
	CreatedBy string
	// Digest is the SHA-256 of the secret handed to the caller.
	Digest [sha256.Size]byte
}

// CreateKey inserts a key and its first secret. When the namespace already
// used k.RequestID it inserts nothing and returns the stored key and false.
func (s *Store) CreateKey(ctx context.Context, k NewKey) (*registryv1.Key, bool, error) {
	now := s.Now()
	id := uuid.Must(uuid.NewV7())
	var key *registryv1.Key
	created := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// Creations in a namespace take turns, so the limit holds under
		// concurrent calls.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('cronmesh.registry.api_keys/' || $1, 0))`, k.Namespace); err != nil {
			return fmt.Errorf("lock namespace keys: %w", err)
		}
		var active int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM api_keys WHERE namespace = $1 AND revoked_at IS NULL`, k.Namespace).Scan(&active); err != nil {
			return fmt.Errorf("count keys: %w", err)
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO api_keys (id, namespace, name, role, request_id, created_at, created_by, rotated_at)
			VALUES ($1, $2, $3, $4, NULLIF($5, ''), $6, $7, $6)
			ON CONFLICT (namespace, request_id) WHERE request_id IS NOT NULL DO NOTHING`,
			id, k.Namespace, k.Name, string(k.Role), k.RequestID, now, k.CreatedBy)
		if err != nil {
			return mapKeyError(err)
		}
		if tag.RowsAffected() == 0 {
			key, err = s.getKey(ctx, tx, now, `k.namespace = $2 AND k.request_id = $3`, k.Namespace, k.RequestID)
			return err
		}
		if active >= MaxKeysPerNamespace {
			return ErrTooManyKeys
		}
		if _, err := tx.Exec(ctx, `INSERT INTO api_key_secrets (sha256, key_id, created_at) VALUES ($1, $2, $3)`,
			k.Digest[:], id, now); err != nil {
			return fmt.Errorf("insert key secret: %w", err)
		}
		if err := bumpKeyRevision(ctx, tx); err != nil {
			return err
		}
		created = true
		key, err = s.getKey(ctx, tx, now, `k.id = $2`, id)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return key, created, nil
}

// KeyFilter selects a page of ListKeys.
type KeyFilter struct {
	PageSize int
	// After is the id the previous page ended at ("" for the first page).
	After string
	// ShowRevoked includes revoked keys.
	ShowRevoked bool
}

// ListKeys returns up to PageSize keys of namespace ordered by id after
// f.After, and the id to continue after ("" on the last page).
func (s *Store) ListKeys(ctx context.Context, namespace string, f KeyFilter) ([]*registryv1.Key, string, error) {
	after := uuid.Nil.String()
	if f.After != "" {
		after = f.After
	}
	rows, err := s.pool.Query(ctx, selectKey+`
		WHERE k.namespace = $2 AND k.id > $3::uuid AND ($4 OR k.revoked_at IS NULL)
		ORDER BY k.id LIMIT $5`, s.Now(), namespace, after, f.ShowRevoked, f.PageSize+1)
	if err != nil {
		return nil, "", fmt.Errorf("list keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*registryv1.Key, error) { return scanKey(r) })
	if err != nil {
		return nil, "", fmt.Errorf("list keys: %w", err)
	}
	next := ""
	if len(keys) > f.PageSize {
		keys = keys[:f.PageSize]
		next = keys[len(keys)-1].Id
	}
	return keys, next, nil
}

// RotateKey gives an unrevoked key a new secret (digest). Its secrets valid
// until now end after grace at the latest (at once for 0); a secret already
// ending sooner keeps its end.
func (s *Store) RotateKey(ctx context.Context, namespace, id string, digest [sha256.Size]byte, grace time.Duration) (*registryv1.Key, error) {
	if _, err := uuid.Parse(id); err != nil {
		return nil, ErrKeyNotFound
	}
	now := s.Now()
	end := now.Add(grace)
	var key *registryv1.Key
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var revoked *time.Time
		err := tx.QueryRow(ctx, `SELECT revoked_at FROM api_keys WHERE namespace = $1 AND id = $2 FOR UPDATE`, namespace, id).Scan(&revoked)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrKeyNotFound
		}
		if err != nil {
			return fmt.Errorf("lock key: %w", err)
		}
		if revoked != nil {
			return ErrKeyRevoked
		}
		if _, err := tx.Exec(ctx, `
			UPDATE api_key_secrets SET expires_at = $2
			WHERE key_id = $1 AND (expires_at IS NULL OR expires_at > $2)`, id, end); err != nil {
			return fmt.Errorf("end previous secrets: %w", err)
		}
		// Ended secrets are of no use: keep the table to the accepted ones.
		if _, err := tx.Exec(ctx, `DELETE FROM api_key_secrets WHERE key_id = $1 AND expires_at <= $2`, id, now); err != nil {
			return fmt.Errorf("delete ended secrets: %w", err)
		}
		var valid int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM api_key_secrets WHERE key_id = $1`, id).Scan(&valid); err != nil {
			return fmt.Errorf("count secrets: %w", err)
		}
		if valid+1 > MaxSecretsPerKey {
			return ErrTooManySecrets
		}
		if _, err := tx.Exec(ctx, `INSERT INTO api_key_secrets (sha256, key_id, created_at) VALUES ($1, $2, $3)`,
			digest[:], id, now); err != nil {
			return fmt.Errorf("insert key secret: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE api_keys SET rotated_at = $2 WHERE id = $1`, id, now); err != nil {
			return fmt.Errorf("update key: %w", err)
		}
		if err := bumpKeyRevision(ctx, tx); err != nil {
			return err
		}
		key, err = s.getKey(ctx, tx, now, `k.id = $2`, id)
		return err
	})
	return key, err
}

// RevokeKey revokes a key and deletes its secrets. Revoking a revoked key
// changes nothing and returns it.
func (s *Store) RevokeKey(ctx context.Context, namespace, id string) (*registryv1.Key, error) {
	if _, err := uuid.Parse(id); err != nil {
		return nil, ErrKeyNotFound
	}
	now := s.Now()
	var key *registryv1.Key
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE api_keys SET revoked_at = $3 WHERE namespace = $1 AND id = $2 AND revoked_at IS NULL`,
			namespace, id, now)
		if err != nil {
			return fmt.Errorf("revoke key: %w", err)
		}
		if tag.RowsAffected() == 1 {
			if _, err := tx.Exec(ctx, `DELETE FROM api_key_secrets WHERE key_id = $1`, id); err != nil {
				return fmt.Errorf("delete secrets of revoked key: %w", err)
			}
			if err := bumpKeyRevision(ctx, tx); err != nil {
				return err
			}
		}
		key, err = s.getKey(ctx, tx, now, `k.namespace = $2 AND k.id = $3`, namespace, id)
		return err
	})
	return key, err
}

// KeyDigests returns the accepted secrets of every namespace at the current
// revision; only the revision, and Unchanged, when that is knownRevision.
// The revision is read before the secrets, so the secrets are never older
// than the revision they are reported with: a change in between is seen
// again at the next call.
func (s *Store) KeyDigests(ctx context.Context, knownRevision int64) (*registryv1.ListKeyDigestsResponse, error) {
	resp := &registryv1.ListKeyDigestsResponse{}
	if err := s.pool.QueryRow(ctx, `SELECT revision FROM api_key_revision`).Scan(&resp.Revision); err != nil {
		return nil, fmt.Errorf("read key revision: %w", err)
	}
	if resp.Revision == knownRevision {
		resp.Unchanged = true
		return resp, nil
	}
	rows, err := s.pool.Query(ctx, `
		SELECT s.sha256, k.id::text, k.namespace, k.role, s.expires_at
		FROM api_key_secrets s JOIN api_keys k ON k.id = s.key_id
		WHERE k.revoked_at IS NULL AND (s.expires_at IS NULL OR s.expires_at > $1)`, s.Now())
	if err != nil {
		return nil, fmt.Errorf("list key digests: %w", err)
	}
	var (
		digest                 []byte
		keyID, namespace, role string
		expires                *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&digest, &keyID, &namespace, &role, &expires}, func() error {
		d := &registryv1.KeyDigest{
			Sha256: append([]byte(nil), digest...), KeyId: keyID, Namespace: namespace,
			Role: keyring.RoleToProto(apikey.Role(role)),
		}
		if expires != nil {
			d.ExpireTime = timestamppb.New(*expires)
		}
		resp.Digests = append(resp.Digests, d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list key digests: %w", err)
	}
	return resp, nil
}

func bumpKeyRevision(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `UPDATE api_key_revision SET revision = revision + 1`); err != nil {
		return fmt.Errorf("bump key revision: %w", err)
	}
	return nil
}

// selectKey reads keys; $1 is now, which decides whether a previous secret
// is still in its grace period.
const selectKey = `
	SELECT k.id::text, k.namespace, k.name, k.role, k.created_at, k.created_by, k.rotated_at, k.revoked_at,
		(SELECT max(s.expires_at) FROM api_key_secrets s WHERE s.key_id = k.id AND s.expires_at > $1)
	FROM api_keys k`

func (s *Store) getKey(ctx context.Context, q querier, now time.Time, where string, args ...any) (*registryv1.Key, error) {
	key, err := scanKey(q.QueryRow(ctx, selectKey+` WHERE `+where, append([]any{now}, args...)...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrKeyNotFound
	}
	return key, err
}

func scanKey(row pgx.Row) (*registryv1.Key, error) {
	var (
		key                     registryv1.Key
		role                    string
		created, rotated        time.Time
		revoked, previousExpiry *time.Time
	)
	if err := row.Scan(&key.Id, &key.Namespace, &key.Name, &role, &created, &key.CreatedBy, &rotated, &revoked, &previousExpiry); err != nil {
		return nil, err
	}
	key.Role = keyring.RoleToProto(apikey.Role(role))
	key.CreateTime = timestamppb.New(created)
	key.RotateTime = timestamppb.New(rotated)
	if revoked != nil {
		key.RevokeTime = timestamppb.New(*revoked)
	}
	if previousExpiry != nil && revoked == nil {
		key.PreviousSecretExpireTime = timestamppb.New(*previousExpiry)
	}
	return &key, nil
}

// mapKeyError turns the unique violation of an unrevoked key's name into
// ErrKeyNameTaken.
func mapKeyError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "api_keys_active_name" {
		return ErrKeyNameTaken
	}
	return fmt.Errorf("insert key: %w", err)
}
