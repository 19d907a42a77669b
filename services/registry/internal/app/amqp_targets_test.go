package app_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
	"github.com/cronmesh/cronmesh/services/registry/internal/app"
)

func amqpJob(name, exchange, key string) *registryv1.Job {
	job := httpJob(name)
	job.Target = &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{Exchange: exchange, RoutingKey: key}}}
	return job
}

func TestAMQPTargetsAreTenantScoped(t *testing.T) {
	t.Parallel()
	renamed := amqptest.UniqueName(t, "ops_jobs") // out of any namespace's reach
	reg := startRegistry(t, withExchange(renamed), withAMQPAllow("alpha=shared.events", "alpha=partners.*"))
	alpha := reg.client(keyAlpha)
	ctx := context.Background()
	for _, tc := range []struct {
		name, exchange, key string
		field               string // "" means accepted
	}{
		{"own exchange", "alpha.reports", "any.key", ""},
		{"own queue", "", "alpha.inbox", ""},
		{"allow-listed exchange", "shared.events", "k", ""},
		{"allow-listed prefix", "", "partners.acme", ""},
		{"the renamed job events exchange", renamed, "job.created", "job.target.amqp.exchange"},
		{"cronmesh's names", "cronmesh.jobs", "job.created", "job.target.amqp.exchange"},
		{"another namespace's exchange", "beta.reports", "k", "job.target.amqp.exchange"},
		{"another namespace's queue", "", "beta.inbox", "job.target.amqp.routing_key"},
		{"a name of no namespace", "reports", "k", "job.target.amqp.exchange"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := alpha.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: amqpJob(tc.name, tc.exchange, tc.key)}))
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			require.Equal(t, []string{tc.field}, rpctest.Violations(t, err))
		})
	}
	// beta's allow-list is its own: alpha's does not apply.
	_, err := reg.client(keyBeta).CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: amqpJob("beta", "shared.events", "k")}))
	require.Equal(t, []string{"job.target.amqp.exchange"}, rpctest.Violations(t, err))
}

func TestRegistryRefusesReachableInternalNames(t *testing.T) {
	t.Parallel()
	_, schema := pgtest.New(t)
	base := app.Config{
		Common:  config.Common{Listen: "127.0.0.1:0", PostgresURL: pgtest.URL(), AMQPURL: amqptest.URL(), ShutdownTimeout: 5 * time.Second},
		APIKeys: config.StringList{"alpha=" + keyAlpha}, Schema: schema,
	}
	for _, tc := range []struct {
		name string
		mod  func(*app.Config)
		want string
	}{
		{"a job events exchange a namespace could publish to", func(c *app.Config) { c.Exchange = "team-a.jobs" },
			`--exchange "team-a.jobs" could be published to by the AMQP targets of namespace "team-a"`},
		{"an allow-list that reaches it", func(c *app.Config) {
			c.Exchange = "ops_jobs"
			c.TargetAMQPAllow = config.StringList{"alpha=ops_jobs"}
		}, `--exchange "ops_jobs" is on the AMQP allow-list of namespace "alpha"`},
		{"an allow-list into cronmesh's names", func(c *app.Config) { c.TargetAMQPAllow = config.StringList{"alpha=cronmesh.dispatch"} },
			"reaches names reserved for cronmesh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := base
			tc.mod(&cfg)
			_, err := app.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
			require.ErrorContains(t, err, tc.want)
		})
	}
}
