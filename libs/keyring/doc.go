// Package keyring authenticates API keys in every service: the keys given
// in configuration (the bootstrap admin keys of their namespaces) and the
// keys managed through the registry's KeyService, of which each process
// holds an in-memory copy refreshed by polling the registry about once a
// second. A revoked key is therefore refused everywhere within seconds, no
// request waits on the registry, and a registry outage leaves the last
// known keys serving. docs/adr/0009-managed-api-keys.md explains the choice.
package keyring
