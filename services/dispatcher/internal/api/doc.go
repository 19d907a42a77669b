// Package api serves cronmesh.dispatcher.v1.DispatchService: browsing,
// redriving and purging the dead-letter store, and cancelling executions.
// Every call is scoped to the caller's namespace (libs/apikey); a dead
// letter of another namespace is NotFound, never Forbidden, so callers learn
// nothing about other namespaces. errors.go is the one place domain errors
// become Connect codes.
package api
