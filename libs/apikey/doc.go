// Package apikey authenticates Connect requests with bearer API keys, each
// bound to one namespace (tenant).
//
// Keys are configured, not stored in a database: a deployment lists
// "namespace=key" pairs (or "namespace=sha256:<hex>" so the plain key need not
// sit in the config); such a key is its namespace's admin, and
// "namespace:editor=..." or "namespace:viewer=..." gives it a lesser role
// (libs/authz enforces roles). Only SHA-256 digests are kept in memory and keys never
// appear in errors or logs.
package apikey
