// Package api serves cronmesh.registry.v1.JobService over Connect: it takes
// the caller's namespace from the authenticated context, validates input,
// calls the store and maps domain errors to Connect codes (errors.go is the
// only place that does).
package api
