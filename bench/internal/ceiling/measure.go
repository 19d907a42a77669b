package ceiling

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/dispatchreq"
	"github.com/cronmesh/cronmesh/libs/execid"
)

// Options configure Measure.
type Options struct {
	AMQPURL string
	Pool    *pgxpool.Pool
	// Name prefixes the exchange, queue and schema the measurement creates
	// and removes (Name+".ceiling", Name+"_ceiling").
	Name string
	// MessageSize is the body of each broker message: the size of the
	// messages the benchmark itself sends, so both cost the same.
	MessageSize int
	// Duration of each measurement after its warm-up (0: 15 s; negative:
	// nothing is measured, and the run says so).
	Duration time.Duration
}

// Machine is both ceilings of one run, or why there are none.
type Machine struct {
	Broker      BrokerResult
	Database    DatabaseResult
	MessageSize int
	Skipped     bool  // Options.Duration was negative
	Err         error // a measurement failed; the benchmark itself can go on
}

// Measure measures the broker's ceiling and then the database's, one after
// the other, so that neither competes with the other. Run it before the
// benchmark starts its own processes, for the same reason.
func Measure(ctx context.Context, o Options) Machine {
	m := Machine{MessageSize: o.MessageSize}
	if o.Duration < 0 {
		m.Skipped = true
		return m
	}
	var err error
	m.Broker, err = Broker(ctx, BrokerOptions{URL: o.AMQPURL, Name: o.Name + ".ceiling", MessageSize: o.MessageSize, Duration: o.Duration})
	if err != nil {
		m.Err = fmt.Errorf("broker ceiling: %w", err)
		return m
	}
	m.Database, err = Database(ctx, DatabaseOptions{Pool: o.Pool, Schema: o.Name + "_ceiling", Duration: o.Duration})
	if err != nil {
		m.Err = fmt.Errorf("database ceiling: %w", err)
	}
	return m
}

// Markdown is a table of both ceilings with rate, the benchmark's own
// result (rateName says what it counts, "deliveries/s" for example), as a
// share of each, followed by note (what one unit of rate costs the
// servers, in the benchmark's words; may be empty); or a line saying why
// nothing was measured. A share is the benchmark's rate over what the
// server alone does with the whole machine, so it is an upper bound of the
// room the benchmark's own work leaves.
func (m Machine) Markdown(rate float64, rateName, note string) string {
	switch {
	case m.Skipped:
		return "\nNot measured in this run (--ceiling-duration < 0).\n\n"
	case m.Err != nil:
		return fmt.Sprintf("\nNot measured: %v\n\n", m.Err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| ceiling | rate | this run's %s as a share |\n| --- | --- | --- |\n", rateName)
	fmt.Fprintf(&b, "| RabbitMQ: persistent %d-byte messages (a DispatchRequest) through a topic exchange into one quorum queue, 4 publishers with confirms (256 in flight each), consumed and acked one by one (prefetch 256); %s | %.0f msg/s consumed (%.0f/s confirmed) | %s |\n",
		m.MessageSize, m.Broker.Elapsed.Round(time.Second), m.Broker.ConsumedPerSecond(), m.Broker.PublishedPerSecond(), share(rate, m.Broker.ConsumedPerSecond()))
	fmt.Fprintf(&b, "| PostgreSQL: ledger-shaped rows, `INSERT … SELECT FROM unnest … ON CONFLICT DO NOTHING RETURNING`, %d rows a transaction, 4 writers; %s | %.0f rows/s (%d commits) | %s |\n\n",
		m.Database.Batch, m.Database.Elapsed.Round(time.Second), m.Database.RowsPerSecond(), m.Database.Commits, share(rate, m.Database.RowsPerSecond()))
	if note != "" {
		b.WriteString(note + "\n")
	}
	return b.String()
}

func share(x, of float64) string {
	if of <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f %%", 100*x/of)
}

// DispatchRequestSize is the encoded size of the DispatchRequest the
// trigger publishes for one slot of job: the size the broker ceiling should
// measure with, so that its messages cost what the benchmark's do.
func DispatchRequestSize(job *registryv1.Job) int {
	now := time.Now()
	return proto.Size(dispatchreq.New(job, dispatchreq.Slot{
		ExecutionID: execid.For(job.GetId(), now), JobID: job.GetId(), Version: job.GetVersion(),
		Nominal: now, Fire: now, Kind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED,
	}))
}
