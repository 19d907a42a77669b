package main

import (
	"context"
	"fmt"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/cronmesh/cronmesh/bench/internal/machine"
)

func machineScenario() *scenario {
	return &scenario{
		name:    "machine",
		summary: "print the machine, Go, PostgreSQL and RabbitMQ versions and settings as Markdown",
		run:     runMachine,
	}
}

func runMachine(ctx context.Context, b *bench) error {
	db, err := b.database(ctx)
	if err != nil {
		return err
	}
	conn, err := amqp091.DialConfig(b.opts.amqpURL, amqp091.Config{Dial: amqp091.DefaultDial(5 * time.Second)})
	if err != nil {
		return fmt.Errorf("connect to RabbitMQ: %w", err)
	}
	defer conn.Close()
	m := machine.Describe(ctx, db, conn)
	fmt.Fprintf(b.out, "\n### Machine\n\n%s\nReported by `%s` at %s.\n", m.Markdown(), b.cmdline, time.Now().UTC().Format(time.RFC3339))
	return nil
}
