//go:build bench

package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/services/alerting/internal/app"
)

// backlogEvents is how many CREATED job events TestJobEventBacklog queues.
const backlogEvents = 50_000

// TestJobEventBacklog times the watchdog's job event consumer alone:
// backlogEvents CREATED events (one per job, as after a BatchCreateJobs
// load) are queued while no alerting runs, then alerting starts and the
// test measures the time until every job is in the table, and the process
// CPU time it took (this process: alerting and the 10 ms count polls).
// Run with: go test -tags bench -run TestJobEventBacklog -v ./services/alerting/internal/app/
func TestJobEventBacklog(t *testing.T) {
	_, schema := pgtest.New(t)
	jobsExchange := amqptest.UniqueName(t, "cronmesh.jobs")
	jobsQueue := amqptest.UniqueName(t, "cronmesh.alerting.jobs")
	execExchange := amqptest.UniqueName(t, "cronmesh.executions")
	execQueue := amqptest.UniqueName(t, "cronmesh.alerting.executions")
	amqptest.DeleteOnCleanup(t, []string{execQueue, jobsQueue}, []string{execExchange, jobsExchange})
	cfg := app.Config{
		Common: config.Common{
			Listen: "127.0.0.1:0", PostgresURL: pgtest.URL(), AMQPURL: amqptest.URL(), LogLevel: "warn", ShutdownTimeout: 5 * time.Second,
		},
		APIKeys: config.StringList{"alpha=" + keyAlpha}, Schema: schema, Workers: 2, Prefetch: 8,
		ExecutionsExchange: execExchange, ExecutionsQueue: execQueue, JobsExchange: jobsExchange, JobsQueue: jobsQueue,
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	run := func() (*app.App, func()) {
		ctx, cancel := context.WithCancel(context.Background())
		a, err := app.New(ctx, cfg, logger)
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		<-a.Ready()
		return a, func() { cancel(); require.NoError(t, <-done) }
	}
	// A first start declares and binds the queues; then stop it.
	_, stop := run()
	stop()

	conn, err := amqp091.Dial(amqptest.URL())
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	anchor := time.Now().UTC().Truncate(time.Minute)
	pubStart := time.Now()
	var confirms []*amqp091.DeferredConfirmation
	for i := range backlogEvents {
		id := fmt.Sprintf("bench-job-%06d", i)
		body, err := proto.Marshal(&eventsv1.JobEvent{
			EventId: "je-" + id, Kind: eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED, Version: 1,
			Job: &registryv1.Job{
				Id: id, Namespace: "alpha", DisplayName: id, Labels: map[string]string{"team": "bench"},
				Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Interval{Interval: &registryv1.Interval{
					Every: durationpb.New(time.Minute), AnchorTime: timestamppb.New(anchor.Add(time.Duration(i) * time.Millisecond)),
				}}},
				CreateTime: timestamppb.New(anchor), Version: 1,
			},
		})
		require.NoError(t, err)
		c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), jobsExchange, "job.created", true, false,
			amqp091.Publishing{Body: body, DeliveryMode: amqp091.Persistent})
		require.NoError(t, err)
		confirms = append(confirms, c)
		if len(confirms) == 1000 {
			for _, c := range confirms {
				ok, err := c.WaitContext(context.Background())
				require.NoError(t, err)
				require.True(t, ok)
			}
			confirms = confirms[:0]
		}
	}
	for _, c := range confirms {
		ok, err := c.WaitContext(context.Background())
		require.NoError(t, err)
		require.True(t, ok)
	}
	t.Logf("queued %d job events in %s", backlogEvents, time.Since(pubStart).Round(time.Millisecond))

	cpu0 := cpuTime(t)
	start := time.Now()
	a, stop := run()
	defer stop()
	for {
		var n int
		require.NoError(t, a.Pool().QueryRow(context.Background(), `SELECT count(*) FROM jobs`).Scan(&n))
		if n == backlogEvents {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cpu := cpuTime(t) - cpu0
	t.Logf("applied %d job events in %s (%.0f events/s, from start); process CPU %s (%.1f ms per 1,000 events)",
		backlogEvents, elapsed.Round(time.Millisecond), float64(backlogEvents)/elapsed.Seconds(), cpu.Round(time.Millisecond),
		float64(cpu.Milliseconds())/(backlogEvents/1000))
}

func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
