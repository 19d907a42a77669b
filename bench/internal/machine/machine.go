// Package machine describes the machine a benchmark ran on (CPU, RAM,
// kernel, Go, and the PostgreSQL and RabbitMQ it measured against), so that
// every report says where its numbers came from in the same words.
package machine

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Machine describes where the numbers were measured. Fields that could not
// be read are empty.
type Machine struct {
	CPU              string
	Cores            int
	RAM              string
	Kernel           string
	Go               string
	PostgreSQL       string
	PostgresSettings string
	RabbitMQ         string
}

// Describe reads the machine from /proc, the PostgreSQL server behind db
// and the RabbitMQ server of conn (nil: not described).
func Describe(ctx context.Context, db *pgxpool.Pool, conn *amqp091.Connection) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				f := strings.Fields(rest)
				if len(f) > 0 {
					kb, _ := strconv.ParseFloat(f[0], 64)
					m.RAM = fmt.Sprintf("%.1f GiB", kb/1024/1024)
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	_ = db.QueryRow(ctx, `SHOW server_version`).Scan(&m.PostgreSQL)
	var sb, sc, wal string
	_ = db.QueryRow(ctx, `SELECT current_setting('shared_buffers'), current_setting('synchronous_commit'), current_setting('max_wal_size')`).Scan(&sb, &sc, &wal)
	m.PostgresSettings = fmt.Sprintf("shared_buffers %s, synchronous_commit %s, max_wal_size %s", sb, sc, wal)
	if conn != nil {
		if v, ok := conn.Properties["version"].(string); ok {
			m.RabbitMQ = v
		}
		if v, ok := conn.Properties["product"].(string); ok && m.RabbitMQ != "" {
			m.RabbitMQ = v + " " + m.RabbitMQ
		}
	}
	return m
}

// Markdown renders the description as a two-column table.
func (m Machine) Markdown() string {
	var b strings.Builder
	b.WriteString("| machine | |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| CPU | %s, %d cores |\n", m.CPU, m.Cores)
	fmt.Fprintf(&b, "| RAM | %s |\n", m.RAM)
	fmt.Fprintf(&b, "| kernel | %s |\n", m.Kernel)
	fmt.Fprintf(&b, "| Go | %s |\n", m.Go)
	fmt.Fprintf(&b, "| PostgreSQL | %s (%s) |\n", m.PostgreSQL, m.PostgresSettings)
	fmt.Fprintf(&b, "| RabbitMQ | %s |\n", m.RabbitMQ)
	return b.String()
}
