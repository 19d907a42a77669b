// Package app wires the history service: configuration, the database and
// its migrations, the ingest consumer, the partition maintainer and the
// HistoryService API.
package app
