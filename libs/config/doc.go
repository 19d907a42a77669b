// Package config parses the command-line flags every cronmesh service takes,
// with CRONMESH_* environment variables as a fallback.
//
// A flag given on the command line always wins; otherwise the environment
// variable CRONMESH_<FLAG_NAME> (upper-cased, '-' replaced by '_') applies;
// otherwise the flag's default. Environment values go through the flag's own
// Set method, so they are validated exactly like command-line values.
//
// This is the only package of cronmesh that reads the environment, and even it
// does so through an injected lookup function so tests need no real
// environment.
package config
