// Package store is the history's PostgreSQL adapter: it merges lifecycle
// events into the executions and attempts tables (partitioned by day of
// nominal time), keeps the partitions (created ahead, dropped after the
// retention) and answers the HistoryService queries.
package store
