package main

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

func ncpu() int { return runtime.NumCPU() }

// machine describes where the numbers were measured.
type machine struct {
	cpu      string
	cores    int
	ram      string
	kernel   string
	goVer    string
	postgres string
	rabbit   string
	pgConf   string
}

func describeMachine(ctx context.Context, db *pgxpool.Pool, conn *amqp091.Connection) machine {
	m := machine{cores: ncpu(), goVer: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
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
					m.ram = fmt.Sprintf("%.1f GiB", kb/1024/1024)
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(b))
	}
	_ = db.QueryRow(ctx, `SHOW server_version`).Scan(&m.postgres)
	var sb, sc, wal string
	_ = db.QueryRow(ctx, `SELECT current_setting('shared_buffers'), current_setting('synchronous_commit'), current_setting('max_wal_size')`).Scan(&sb, &sc, &wal)
	m.pgConf = fmt.Sprintf("shared_buffers %s, synchronous_commit %s, max_wal_size %s", sb, sc, wal)
	if conn != nil {
		if v, ok := conn.Properties["version"].(string); ok {
			m.rabbit = v
		}
		if v, ok := conn.Properties["product"].(string); ok && m.rabbit != "" {
			m.rabbit = v + " " + m.rabbit
		}
	}
	return m
}

func (m machine) markdown() string {
	var b strings.Builder
	b.WriteString("| machine | |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| CPU | %s, %d cores |\n", m.cpu, m.cores)
	fmt.Fprintf(&b, "| RAM | %s |\n", m.ram)
	fmt.Fprintf(&b, "| kernel | %s |\n", m.kernel)
	fmt.Fprintf(&b, "| Go | %s |\n", m.goVer)
	fmt.Fprintf(&b, "| PostgreSQL | %s (%s) |\n", m.postgres, m.pgConf)
	fmt.Fprintf(&b, "| RabbitMQ | %s |\n", m.rabbit)
	return b.String()
}
