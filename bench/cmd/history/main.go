// Command history-bench measures the history service and appends what it
// measured to a Markdown report. It never starts the service:
// deploy/local/bench-history.sh does, so the benchmark measures the binary
// and configuration `make dev` runs.
//
//	history-bench machine [flags]   the machine, Go, PostgreSQL, the load on the machine
//	history-bench ingest  [flags]   publish lifecycle events in batches of ~100; events/s committed
//	history-bench load    [flags]   bulk-load executions into the schema (COPY), before the service starts
//	history-bench query   [flags]   ListExecutions latency (one job and a day; text search over a day)
//	history-bench cleanup [flags]   drop the run's schema, queue and exchange
//
// Every flag also reads CRONMESH_<FLAG> from the environment (--api-key from
// CRONMESH_API_KEY); a flag given on the command line wins.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cronmesh/cronmesh/libs/config"
)

type options struct {
	postgresURL, amqpURL, schema, exchange, historyURL, apiKey, out, namespace string
	events, batch, publishers                                                  int
	executions, days, jobs, workers                                            int
	samples, searchSamples                                                     int
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "history-bench:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: history-bench machine|ingest|load|query [flags]")
	}
	scenario, args := args[0], args[1:]
	fs := flag.NewFlagSet("history-bench "+scenario, flag.ContinueOnError)
	var o options
	fs.StringVar(&o.postgresURL, "postgres-url", config.DefaultPostgresURL, "PostgreSQL URL")
	fs.StringVar(&o.amqpURL, "amqp-url", config.DefaultAMQPURL, "RabbitMQ URL")
	fs.StringVar(&o.schema, "schema", "", "the history schema of this run")
	fs.StringVar(&o.exchange, "exchange", "", "the executions exchange of this run")
	var queue string
	fs.StringVar(&queue, "queue", "", "cleanup: the history queue of this run")
	fs.StringVar(&o.historyURL, "history-url", "http://127.0.0.1:8084", "the history service")
	fs.StringVar(&o.apiKey, "api-key", "", "API key of the bench namespace")
	fs.StringVar(&o.namespace, "namespace", "bench", "namespace of the generated executions")
	fs.StringVar(&o.out, "out", "", "report file to append to (default stdout)")
	fs.IntVar(&o.events, "events", 1_000_000, "ingest: lifecycle events to publish")
	fs.IntVar(&o.batch, "batch", 100, "ingest: events per broker message")
	fs.IntVar(&o.publishers, "publishers", 4, "ingest: concurrent publishers")
	fs.IntVar(&o.executions, "executions", 10_000_000, "load: executions to load")
	fs.IntVar(&o.days, "days", 30, "load: days they span (ending today)")
	fs.IntVar(&o.jobs, "jobs", 0, "load: jobs (default: executions/days/1440, every job runs every minute)")
	fs.IntVar(&o.workers, "workers", 2, "load: days loaded at once")
	fs.IntVar(&o.samples, "samples", 2000, "query: ListExecutions calls for one job and a day")
	fs.IntVar(&o.searchSamples, "search-samples", 200, "query: text searches over a day")
	if err := config.Parse(fs, args, os.LookupEnv); err != nil {
		return err
	}
	out := io.Writer(os.Stdout)
	if o.out != "" {
		f, err := os.OpenFile(o.out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	if scenario != "cleanup" {
		fmt.Fprintf(out, "\n<!-- history-bench %s %s -->\n", scenario, strings.Join(redactArgs(args), " "))
	}
	switch scenario {
	case "machine":
		return machine(out, o)
	case "ingest":
		return ingest(ctx, out, o)
	case "load":
		return load(ctx, out, o)
	case "query":
		return query(ctx, out, o)
	case "cleanup":
		return cleanup(ctx, o, queue)
	default:
		return fmt.Errorf("unknown scenario %q", scenario)
	}
}

func redactArgs(args []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if strings.HasPrefix(a, "--api-key") || strings.HasPrefix(a, "-api-key") {
			out[i] = "--api-key=<redacted>"
		}
	}
	return out
}

// machine writes the hardware, Go version and the load on the machine now.
func machine(out io.Writer, o options) error {
	model, cpus := cpuInfo()
	fmt.Fprintf(out, "\n### Machine\n\n| | |\n| --- | --- |\n")
	fmt.Fprintf(out, "| CPU | %s, %d logical CPUs |\n", model, cpus)
	fmt.Fprintf(out, "| memory | %s |\n", memTotal())
	fmt.Fprintf(out, "| Go | %s %s/%s |\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(out, "| time | %s |\n", time.Now().UTC().Format(time.RFC3339))
	loadNow(out, "at the start")
	return nil
}

// loadNow samples /proc/loadavg and the processes using the most CPU, so a
// reader can tell a quiet run from one that shared the cores.
func loadNow(out io.Writer, when string) {
	la, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(out, "\nLoad %s: /proc/loadavg `%s`; top CPU processes over the next second (top -b -n 2 -d 1, second sample):\n\n```\n", when, strings.TrimSpace(string(la)))
	top, err := exec.Command("top", "-b", "-n", "2", "-d", "1", "-w", "120").Output()
	if err != nil {
		fmt.Fprintf(out, "top failed: %v\n", err)
	} else {
		// The second sample is the one measured over the second; its
		// process table starts after its "PID" header.
		text := string(top)
		if i := strings.LastIndex(text, "top - "); i >= 0 {
			text = text[i:]
		}
		lines := strings.Split(strings.TrimSpace(text), "\n")
		for i, l := range lines {
			if strings.Contains(l, "PID") && strings.Contains(l, "COMMAND") {
				lines = append(lines[:1:1], lines[i:min(len(lines), i+9)]...)
				break
			}
		}
		fmt.Fprintln(out, strings.Join(lines, "\n"))
	}
	fmt.Fprintln(out, "```")
}

func cpuInfo() (string, int) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown", runtime.NumCPU()
	}
	defer f.Close()
	model, cpus := "", 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		switch strings.TrimSpace(k) {
		case "processor":
			cpus++
		case "model name":
			if model == "" {
				model = strings.TrimSpace(v)
			}
		}
	}
	return model, cpus
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
			return fmt.Sprintf("%.1f GiB", kb/1024/1024)
		}
	}
	return "unknown"
}

// percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func verdict(ok bool) string {
	if ok {
		return "**MET**"
	}
	return "**MISSED**"
}
