-- Managed API keys (docs/adr/0009-managed-api-keys.md). A key is an
-- identity with a role; its secrets are kept apart because a rotation gives
-- it a new secret while the previous one stays valid for a grace period.
-- Only SHA-256 digests of secrets are stored, never a secret.
CREATE TABLE api_keys (
    id          uuid        PRIMARY KEY,
    namespace   text        NOT NULL,
    name        text        NOT NULL,
    role        text        NOT NULL CHECK (role IN ('admin', 'editor', 'viewer')),
    -- CreateKey's idempotency key.
    request_id  text,
    created_at  timestamptz NOT NULL,
    -- The id of the key that created this one.
    created_by  text        NOT NULL,
    -- When the current secret was issued.
    rotated_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);
-- ListKeys pages by (namespace, id); id is a UUIDv7, so this is also
-- creation order.
CREATE INDEX api_keys_namespace_id ON api_keys (namespace, id);
CREATE UNIQUE INDEX api_keys_active_name ON api_keys (namespace, name) WHERE revoked_at IS NULL;
CREATE UNIQUE INDEX api_keys_request_id ON api_keys (namespace, request_id) WHERE request_id IS NOT NULL;

-- The accepted secrets of unrevoked keys: the current one (expires_at NULL)
-- and previous ones in their grace period. Revoking a key deletes its rows.
CREATE TABLE api_key_secrets (
    sha256     bytea       PRIMARY KEY CHECK (length(sha256) = 32),
    key_id     uuid        NOT NULL REFERENCES api_keys (id),
    created_at timestamptz NOT NULL,
    expires_at timestamptz
);
CREATE INDEX api_key_secrets_key_id ON api_key_secrets (key_id);

-- One row whose revision every change to the keys increments, in the
-- change's transaction: a service whose copy is at the current revision
-- learns so from one row.
CREATE TABLE api_key_revision (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    revision  bigint  NOT NULL
);
INSERT INTO api_key_revision (revision) VALUES (1);
