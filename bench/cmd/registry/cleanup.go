package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

func cleanupScenario() *scenario {
	return &scenario{
		name:    "cleanup",
		summary: "drop --schema (CASCADE) and delete --exchange: what a benchmark run leaves behind",
		run:     runCleanup,
	}
}

// runCleanup removes a benchmark's schema and exchange. It refuses the
// registry's production defaults so that a mistyped flag cannot drop real
// jobs.
func runCleanup(ctx context.Context, b *bench) error {
	if b.opts.schema == "registry" || b.opts.schema == "public" || b.opts.schema == "" {
		return fmt.Errorf("refusing to drop schema %q: cleanup is for benchmark schemas", b.opts.schema)
	}
	db, err := b.database(ctx)
	if err != nil {
		return err
	}
	if _, err := db.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{b.opts.schema}.Sanitize()+` CASCADE`); err != nil {
		return fmt.Errorf("drop schema %s: %w", b.opts.schema, err)
	}
	b.logf("dropped schema %s", b.opts.schema)
	if b.opts.exchange == "" {
		return nil
	}
	if b.opts.exchange == "cronmesh.jobs" {
		return errors.New(`refusing to delete exchange "cronmesh.jobs": cleanup is for benchmark exchanges`)
	}
	conn, err := amqp091.DialConfig(b.opts.amqpURL, amqp091.Config{Dial: amqp091.DefaultDial(5 * time.Second)})
	if err != nil {
		return fmt.Errorf("connect to RabbitMQ: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open a RabbitMQ channel: %w", err)
	}
	defer ch.Close()
	if err := ch.ExchangeDelete(b.opts.exchange, false, false); err != nil {
		return fmt.Errorf("delete exchange %s: %w", b.opts.exchange, err)
	}
	b.logf("deleted exchange %s", b.opts.exchange)
	return nil
}
