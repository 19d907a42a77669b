// Package api is the Connect handler of cronmesh.history.v1.HistoryService:
// it validates requests, takes the namespace from the caller's API key and
// maps store errors to Connect codes (errors.go, the one place that does).
package api
