package meshrun

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/rabbitmq/amqp091-go"

	"github.com/cronmesh/cronmesh/libs/broker"
)

// Cleanup drops the mesh's schemas and deletes its queues and exchanges.
// Call it after Close: a running service would declare them again.
func (m *Mesh) Cleanup(ctx context.Context) error {
	return errors.Join(m.dropSchemas(ctx), m.deleteBrokerObjects())
}

func (m *Mesh) dropSchemas(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, m.opts.PostgresURL)
	if err != nil {
		return fmt.Errorf("meshrun: cleanup: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var errs []error
	for _, schema := range m.Schemas {
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			errs = append(errs, fmt.Errorf("meshrun: dropping schema %s: %w", schema, err))
		}
	}
	return errors.Join(errs...)
}

func (m *Mesh) deleteBrokerObjects() error {
	conn, err := amqp091.Dial(m.opts.AMQPURL)
	if err != nil {
		return fmt.Errorf("meshrun: cleanup: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("meshrun: cleanup: %w", err)
	}
	defer ch.Close()
	n := m.Names
	queues := []string{n.DeadQueue, n.TriggerJobs, n.AlertingJobs, n.HistoryExecutions, n.AlertingExecutions, n.RegistryExecutions}
	for _, b := range broker.DispatchQueues(n.Dispatch, n.DispatchQueue) {
		queues = append(queues, b.Queue)
	}
	for _, b := range broker.RetryTiers(n.Retry, n.RetryQueue, n.Dispatch, m.opts.RetryTiers) {
		queues = append(queues, b.Queue)
	}
	// A delete of a queue or exchange that does not exist succeeds, so the
	// only errors here are real ones (and they close the channel).
	for _, q := range queues {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			return fmt.Errorf("meshrun: deleting queue %s: %w", q, err)
		}
	}
	for _, x := range []string{n.Jobs, n.Executions, n.Dispatch, n.Retry, n.Dead} {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			return fmt.Errorf("meshrun: deleting exchange %s: %w", x, err)
		}
	}
	return nil
}
