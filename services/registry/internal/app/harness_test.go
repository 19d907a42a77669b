package app_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/quota"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/apptest"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
	"github.com/cronmesh/cronmesh/services/registry/internal/app"
)

const (
	keyAlpha = "alpha-key-0123456789abcdef"
	keyBeta  = "beta-key-0123456789abcdef"
)

// registry is one running registry against a throwaway schema and exchange,
// with a queue bound to every job event.
type registry struct {
	app      *app.App
	baseURL  string
	exchange string
	events   string // queue bound to "job.#"
	// executions is the exchange the registry takes execution events from.
	executions string
}

type option func(*app.Config)

// withMaxJobs caps the jobs of each namespace.
func withMaxJobs(limits quota.Limits) option { return func(c *app.Config) { c.MaxJobs = limits } }

// withAMQPURL points the registry's relay at another broker address (a proxy).
func withAMQPURL(url string) option { return func(c *app.Config) { c.AMQPURL = url } }

// withoutPauseOnFailure leaves the execution events unconsumed: a
// subscription racing a broker outage trips the race detector inside
// watermill-amqp (ConnectionWrapper.IsConnected against
// handleConnectionClose), which is not what an outage test is about.
func withoutPauseOnFailure() option { return func(c *app.Config) { c.PauseOnFailure = false } }

// withExchange renames the job events exchange (its events are then not
// on the harness's queue).
func withExchange(name string) option { return func(c *app.Config) { c.Exchange = name } }

// withAMQPAllow sets the AMQP allow-list.
func withAMQPAllow(entries ...string) option {
	return func(c *app.Config) { c.TargetAMQPAllow = entries }
}

func startRegistry(t *testing.T, opts ...option) *registry {
	t.Helper()
	_, schema := pgtest.New(t)
	exchange := amqptest.UniqueName(t, "cronmesh.jobs")
	queue := amqptest.DeclareTopicQueue(t, exchange, "job.#")
	cfg := app.Config{
		Common: config.Common{
			Listen:          "127.0.0.1:0",
			PostgresURL:     pgtest.URL(),
			AMQPURL:         amqptest.URL(),
			LogLevel:        "warn",
			ShutdownTimeout: 5 * time.Second,
		},
		APIKeys:     config.StringList{"alpha=" + keyAlpha, "beta=" + keyBeta},
		Schema:      schema,
		Exchange:    exchange,
		OutboxLanes: 4,
		// Every registry consumes its own execution events, so that one
		// test's outcomes never pause another's jobs.
		ExecutionsExchange: amqptest.UniqueName(t, "cronmesh.executions"),
		ExecutionsQueue:    amqptest.UniqueName(t, "cronmesh.registry.executions"),
		PauseOnFailure:     true,
	}
	for _, o := range opts {
		o(&cfg)
	}
	amqptest.DeleteOnCleanup(t, []string{cfg.ExecutionsQueue}, []string{cfg.ExecutionsExchange})
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, baseURL := apptest.Start(t, "registry", func(ctx context.Context) (*app.App, error) { return app.New(ctx, cfg, logger) })
	return &registry{app: a, baseURL: baseURL, exchange: exchange, events: queue, executions: cfg.ExecutionsExchange}
}

// client returns a JobService client that sends key, over h2c so that the
// gRPC protocol works without TLS.
func (r *registry) client(key string, opts ...connect.ClientOption) registryv1connect.JobServiceClient {
	opts = append(opts, connect.WithInterceptors(rpctest.BearerInterceptor(key)))
	return registryv1connect.NewJobServiceClient(rpctest.H2CClient(), r.baseURL, opts...)
}

// nextEvents reads n job events from the registry's queue, in order.
func (r *registry) nextEvents(t *testing.T, n int) []*eventsv1.JobEvent {
	t.Helper()
	var events []*eventsv1.JobEvent
	for _, d := range amqptest.Consume(t, r.events, n, 15*time.Second) {
		ev := &eventsv1.JobEvent{}
		require.NoError(t, proto.Unmarshal(d.Body, ev))
		require.Equal(t, ev.EventId, d.MessageId, "the AMQP message id is the event id")
		require.Equal(t, "job."+routingSuffix(ev.Kind), d.RoutingKey)
		events = append(events, ev)
	}
	return events
}

func routingSuffix(kind eventsv1.JobEventKind) string {
	return map[eventsv1.JobEventKind]string{
		eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED:       "created",
		eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED:       "updated",
		eventsv1.JobEventKind_JOB_EVENT_KIND_DELETED:       "deleted",
		eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED:        "paused",
		eventsv1.JobEventKind_JOB_EVENT_KIND_RESUMED:       "resumed",
		eventsv1.JobEventKind_JOB_EVENT_KIND_RUN_REQUESTED: "run_requested",
	}[kind]
}

// requireNoMoreEvents asserts that the outbox empties and that nothing more
// than what the test consumed reached the events queue. It waits for the
// outbox first: a row leaves it only after the broker confirmed it (so its
// message is in the queue by then), but the test may consume a message
// before the relay has deleted its row.
func (r *registry) requireNoMoreEvents(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		var pending int
		err := r.app.Pool().QueryRow(context.Background(), `SELECT count(*) FROM outbox`).Scan(&pending)
		return err == nil && pending == 0
	}, 15*time.Second, 20*time.Millisecond, "events still waiting in the outbox")
	require.Empty(t, amqptest.Drain(t, r.events), "unexpected events on the queue")
}
