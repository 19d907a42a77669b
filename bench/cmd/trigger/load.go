package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

const benchNamespace = "tbench"

// newJob is a job as the registry stores it after CreateJob (defaults
// filled in), with schedule s.
func newJob(id string, i int, s *registryv1.Schedule, created time.Time) *registryv1.Job {
	maxRetries := int32(5)
	return &registryv1.Job{
		Id: id, Namespace: benchNamespace, DisplayName: "bench job " + strconv.Itoa(i), Version: 1,
		Schedule: s,
		Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Method: "POST", Url: "http://127.0.0.1:9/hook", Timeout: durationpb.New(5 * time.Second),
			SigningSecret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		}}},
		RetryPolicy:   &registryv1.RetryPolicy{MaxRetries: &maxRetries},
		CatchUpWindow: durationpb.New(time.Hour),
		Priority:      registryv1.Priority_PRIORITY_NORMAL,
		Labels:        map[string]string{"bench": "trigger"},
		CreateTime:    timestamppb.New(created),
		UpdateTime:    timestamppb.New(created),
	}
}

func cronSchedule(expr, tz string) *registryv1.Schedule {
	return &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: expr}, TimeZone: tz}
}

func atSchedule(at time.Time) *registryv1.Schedule {
	return &registryv1.Schedule{Kind: &registryv1.Schedule_At{At: timestamppb.New(at)}, TimeZone: "UTC"}
}

// newIDs returns n UUIDv7 job ids, as the registry makes them.
func newIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7()).String()
	}
	return ids
}

// publishCreated publishes one CREATED JobEvent per job to exchange, as the
// registry's outbox relay would (persistent, with publisher confirms), from
// `publishers` channels in parallel, and returns once every event is
// confirmed.
func publishCreated(ctx context.Context, conn *amqp091.Connection, exchange string, jobs []*registryv1.Job, publishers int) error {
	publishers = max(1, min(publishers, len(jobs)))
	chunk := (len(jobs) + publishers - 1) / publishers
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for p := range publishers {
		lo, hi := p*chunk, min((p+1)*chunk, len(jobs))
		if lo >= hi {
			continue
		}
		wg.Go(func() {
			if err := publishChunk(ctx, conn, exchange, jobs[lo:hi]); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func publishChunk(ctx context.Context, conn *amqp091.Connection, exchange string, jobs []*registryv1.Job) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	// At most `window` unconfirmed messages, like the registry's relay.
	const window = 1000
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, window))
	pending := 0
	wait := func(n int) error {
		for pending > n {
			select {
			case c, ok := <-confirms:
				if !ok {
					return fmt.Errorf("publish job events: channel closed")
				}
				if !c.Ack {
					return fmt.Errorf("publish job events: nack")
				}
				pending--
			case <-time.After(60 * time.Second):
				return fmt.Errorf("publish job events: no confirm within 60s")
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	for _, job := range jobs {
		ev := &eventsv1.JobEvent{
			EventId:   uuid.NewString(),
			Kind:      eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED,
			Version:   1,
			Job:       job,
			OccurTime: job.CreateTime,
		}
		body, err := proto.Marshal(ev)
		if err != nil {
			return err
		}
		if err := wait(window - 1); err != nil {
			return err
		}
		if err := ch.PublishWithContext(ctx, exchange, "job.created", false, false,
			amqp091.Publishing{MessageId: ev.EventId, Body: body, DeliveryMode: amqp091.Persistent, ContentType: "application/protobuf"}); err != nil {
			return err
		}
		pending++
	}
	return wait(0)
}
