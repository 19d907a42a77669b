// Package store is the history's PostgreSQL adapter: it merges lifecycle
// events into the executions table (one row per execution, holding its
// latest attempt) and the attempts table (the attempts a later one
// replaced), both partitioned by day of nominal time, keeps the partitions
// (created ahead, dropped after the retention) and answers the
// HistoryService queries.
package store
