// Command history-bench measures the history service and appends what it
// measured to a Markdown report. It never starts the service:
// deploy/local/bench-history.sh does, so the benchmark measures the binary
// and configuration `make dev` runs.
//
//	history-bench machine [flags]   the machine, Go, PostgreSQL, the load on the machine
//	history-bench ingest  [flags]   publish lifecycle events in the dispatcher's mix, batches of ~100; events/s and executions/s committed
//	history-bench load    [flags]   bulk-load executions into the schema (COPY), before the service starts
//	history-bench query   [flags]   ListExecutions latency (one job and a day; text search over a day)
//	history-bench cleanup [flags]   drop the run's schema, queue and exchange
//
// Every flag also reads CRONMESH_<FLAG> from the environment (--api-key from
// CRONMESH_API_KEY); a flag given on the command line wins.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/cronmesh/cronmesh/bench/internal/eventmix"
	"github.com/cronmesh/cronmesh/bench/internal/machine"
	"github.com/cronmesh/cronmesh/bench/internal/procstat"
	benchreport "github.com/cronmesh/cronmesh/bench/internal/report"
	"github.com/cronmesh/cronmesh/libs/config"
)

type options struct {
	postgresURL, amqpURL, schema, exchange, historyURL, apiKey, out, namespace string
	events, batch, publishers                                                  int
	executions, days, jobs, workers                                            int
	samples, searchSamples                                                     int
	slowShare                                                                  float64
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
	fs.IntVar(&o.events, "events", 1_000_000, "ingest: lifecycle events to publish (one more when the last execution is slow)")
	fs.Float64Var(&o.slowShare, "slow-share", eventmix.DefaultSlowShare, "ingest: "+eventmix.SlowShareUsage)
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
		return describe(ctx, out, o)
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
func describe(ctx context.Context, out io.Writer, o options) error {
	db, err := pgxpool.New(ctx, o.postgresURL)
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := amqp091.Dial(o.amqpURL)
	if err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	defer conn.Close()
	fmt.Fprintf(out, "\n### Machine\n\n%s| time | %s |\n", machine.Describe(ctx, db, conn).Markdown(), time.Now().UTC().Format(time.RFC3339))
	loadNow(out, "at the start")
	return nil
}

// loadNow samples the load average and, over the next second, the CPU of
// PostgreSQL, RabbitMQ and everything else, so a reader can tell a quiet
// run from one that shared the cores.
func loadNow(out io.Writer, when string) {
	fmt.Fprintf(out, "\nLoad %s: load average `%s`; CPU over the next second:\n", when, procstat.LoadAverage())
	s := procstat.New()
	me := map[string]int{"history-bench": os.Getpid()}
	before := s.Snapshot(me)
	time.Sleep(time.Second)
	var d benchreport.Doc
	d.Usage(procstat.Between(before, s.Snapshot(me)), []string{"history-bench", procstat.Postgres, procstat.RabbitMQ}, nil)
	_, _ = d.WriteTo(out)
}

func verdict(ok bool) string {
	if ok {
		return "**MET**"
	}
	return "**MISSED**"
}
