package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// runCleanup removes what killed bench runs left behind: schemas, queues and
// exchanges whose names start with tbench_ (every run removes its own at the
// end; this is for a run that was SIGKILLed); with --tag, only the names of
// runs given that tag. Queue and exchange names are
// listed with rabbitmqctl when it is available.
func runCleanup(ctx context.Context, args []string) error {
	fs, c := flags("cleanup")
	if err := fs.Parse(args); err != nil {
		return err
	}
	prefix := schemaPrefix
	if c.tag != "" {
		prefix += c.tag + "_"
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.postgresURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)`, prefix)
	if err != nil {
		return err
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, s := range schemas {
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE"); err != nil {
			return fmt.Errorf("drop schema %s: %w", s, err)
		}
		logf("dropped schema %s", s)
	}
	queues := rabbitNames(ctx, "list_queues", prefix)
	exchanges := rabbitNames(ctx, "list_exchanges", prefix)
	if len(queues)+len(exchanges) == 0 {
		return nil
	}
	ac, err := amqp091.Dial(c.amqpURL)
	if err != nil {
		return err
	}
	defer ac.Close()
	ch, err := ac.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	for _, q := range queues {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			return fmt.Errorf("delete queue %s: %w", q, err)
		}
		logf("deleted queue %s", q)
	}
	for _, x := range exchanges {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			return fmt.Errorf("delete exchange %s: %w", x, err)
		}
		logf("deleted exchange %s", x)
	}
	return nil
}

// rabbitNames lists queue or exchange names starting with the bench prefix
// (none when rabbitmqctl is not usable).
func rabbitNames(ctx context.Context, what, prefix string) []string {
	out, err := exec.CommandContext(ctx, "rabbitmqctl", "-q", what, "name").Output()
	if err != nil {
		return nil
	}
	var names []string
	for line := range strings.SplitSeq(string(out), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, prefix) {
			names = append(names, line)
		}
	}
	return names
}
