package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

func machineScenario() *scenario {
	return &scenario{
		name:    "machine",
		summary: "print the machine, Go, PostgreSQL and RabbitMQ versions and settings as Markdown",
		run:     runMachine,
	}
}

func runMachine(ctx context.Context, b *bench) error {
	cpuModel, cpus := cpuInfo()
	pairs := [][2]string{
		kv("CPU", fmt.Sprintf("%s, %d logical CPUs (runtime.NumCPU %d)", cpuModel, cpus, runtime.NumCPU())),
		kv("memory", memTotal()),
		kv("OS / kernel", strings.TrimSpace(osRelease()+" / Linux "+readTrim("/proc/sys/kernel/osrelease"))),
		kv("Go", runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH),
	}
	db, err := b.database(ctx)
	if err != nil {
		return err
	}
	var pgVersion string
	if err := db.QueryRow(ctx, `SELECT version()`).Scan(&pgVersion); err != nil {
		return fmt.Errorf("read the PostgreSQL version: %w", err)
	}
	pairs = append(pairs, kv("PostgreSQL", pgVersion))
	settings, err := pgSettings(ctx, db.QueryRow)
	if err != nil {
		return err
	}
	pairs = append(pairs, kv("PostgreSQL settings", settings))
	rabbit, err := rabbitVersion(b.opts.amqpURL)
	if err != nil {
		return err
	}
	pairs = append(pairs, kv("RabbitMQ", rabbit))
	fmt.Fprintf(b.out, "\n### Machine\n\n%s\nReported by `%s` at %s.\n", kvTable(pairs...), b.cmdline, time.Now().UTC().Format(time.RFC3339))
	return nil
}

func cpuInfo() (model string, cpus int) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown (" + err.Error() + ")", runtime.NumCPU()
	}
	defer f.Close()
	virtual := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, _ := strings.Cut(sc.Text(), ":")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch key {
		case "processor":
			cpus++
		case "model name":
			if model == "" {
				model = val
			}
		case "flags":
			virtual = virtual || strings.Contains(" "+val+" ", " hypervisor ")
		}
	}
	if virtual {
		model += " (virtual machine)"
	}
	return model, cpus
}

func memTotal() string {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	return "unknown"
}

func osRelease() string {
	f, err := os.Open("/etc/os-release")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// pgSettings lists the server settings that move write and read speed.
func pgSettings(ctx context.Context, queryRow func(context.Context, string, ...any) pgx.Row) (string, error) {
	var s string
	err := queryRow(ctx, `
		SELECT string_agg(name || '=' || current_setting(name), ', ' ORDER BY name)
		FROM pg_settings
		WHERE name IN ('shared_buffers', 'synchronous_commit', 'fsync', 'max_wal_size', 'wal_compression',
		               'work_mem', 'effective_cache_size', 'checkpoint_timeout', 'max_connections', 'plan_cache_mode')`).Scan(&s)
	if err != nil {
		return "", fmt.Errorf("read PostgreSQL settings: %w", err)
	}
	return s, nil
}

// rabbitVersion asks the broker for its version in the AMQP handshake.
func rabbitVersion(url string) (string, error) {
	conn, err := amqp091.DialConfig(url, amqp091.Config{Dial: amqp091.DefaultDial(5 * time.Second)})
	if err != nil {
		return "", fmt.Errorf("connect to RabbitMQ: %w", err)
	}
	defer conn.Close()
	product, _ := conn.Properties["product"].(string)
	version, _ := conn.Properties["version"].(string)
	if version == "" {
		return "", errors.New("RabbitMQ did not report its version")
	}
	return strings.TrimSpace(product + " " + version), nil
}
