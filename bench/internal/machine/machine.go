// Package machine describes the machine a benchmark ran on (CPU, whether it
// is a virtual machine, RAM, OS and kernel, Go, and the PostgreSQL and
// RabbitMQ it measured against with the settings that move their speed),
// so that every report says where its numbers came from in the same words.
package machine

import (
	"bufio"
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
	CPU              string // model name, "(virtual machine)" when the hypervisor flag is set
	Cores            int
	RAM              string
	OS               string // PRETTY_NAME of /etc/os-release
	Kernel           string
	Go               string
	PostgreSQL       string
	PostgresSettings string
	// AutovacuumOff: the server does not vacuum on its own. The mesh's
	// busiest tables then bloat through a run and every scan of them slows
	// down, so the figures are not a production server's: the report says
	// so above all of them.
	AutovacuumOff bool
	RabbitMQ      string
}

// Describe reads the machine from /proc, the PostgreSQL server behind db
// (nil: not described) and the RabbitMQ server of conn (nil: not
// described).
func Describe(ctx context.Context, db *pgxpool.Pool, conn *amqp091.Connection) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH}
	virtual := false
	scan("/proc/cpuinfo", func(k, v string) {
		switch k {
		case "model name":
			if m.CPU == "" {
				m.CPU = v
			}
		case "flags":
			virtual = virtual || strings.Contains(" "+v+" ", " hypervisor ")
		}
	})
	if virtual {
		m.CPU += " (virtual machine)"
	}
	scan("/proc/meminfo", func(k, v string) {
		if k == "MemTotal" {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(v, " kB"), 64)
			m.RAM = fmt.Sprintf("%.1f GiB", kb/1024/1024)
		}
	})
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if db != nil {
		_ = db.QueryRow(ctx, `SHOW server_version`).Scan(&m.PostgreSQL)
		// The settings that move write and read speed.
		_ = db.QueryRow(ctx, `SELECT string_agg(name || ' ' || current_setting(name), ', ' ORDER BY name),
       bool_or(name = 'autovacuum' AND setting = 'off')
FROM pg_settings
WHERE name IN ('shared_buffers', 'synchronous_commit', 'fsync', 'max_wal_size', 'wal_compression',
               'work_mem', 'effective_cache_size', 'checkpoint_timeout', 'max_connections', 'autovacuum')`).Scan(&m.PostgresSettings, &m.AutovacuumOff)
	}
	if conn != nil {
		product, _ := conn.Properties["product"].(string)
		if v, ok := conn.Properties["version"].(string); ok {
			m.RabbitMQ = strings.TrimSpace(product + " " + v)
		}
	}
	return m
}

// scan calls fn with the trimmed key and value of every "key: value" line
// of path.
func scan(path string, fn func(k, v string)) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			fn(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
}

// Markdown renders the description as a two-column table.
func (m Machine) Markdown() string {
	var b strings.Builder
	b.WriteString("| machine | |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| CPU | %s, %d cores |\n", m.CPU, m.Cores)
	fmt.Fprintf(&b, "| RAM | %s |\n", m.RAM)
	fmt.Fprintf(&b, "| OS, kernel | %s, Linux %s |\n", m.OS, m.Kernel)
	fmt.Fprintf(&b, "| Go | %s |\n", m.Go)
	fmt.Fprintf(&b, "| PostgreSQL | %s (%s) |\n", m.PostgreSQL, m.PostgresSettings)
	fmt.Fprintf(&b, "| RabbitMQ | %s |\n", m.RabbitMQ)
	if m.AutovacuumOff {
		b.WriteString("\n**PostgreSQL ran with autovacuum off**, which no production server does: the trigger's outbox " +
			"and schedule rows and the alerting service's job rows bloat through the run, and the figures below are worse for it " +
			"(`make services` turns it on).\n")
	}
	return b.String()
}
