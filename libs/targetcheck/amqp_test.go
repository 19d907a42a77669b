package targetcheck

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewAMQPPolicyRefusesReachableInternalNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		internal []InternalName
		allow    map[string][]string
		wantErr  string // "" means the policy is built
	}{
		{"defaults", []InternalName{{Flag: "dispatch-exchange", Name: "cronmesh.dispatch"}, {Flag: "dispatch-queue", Name: "cronmesh.dispatch", Family: true}}, nil, ""},
		{"renamed, not namespace-like", []InternalName{{Flag: "dispatch-exchange", Name: "ops_dispatch"}, {Flag: "dead-queue", Name: "Ops.dead"}, {Flag: "queue", Name: "history"}}, nil, ""},
		{"empty means the default", []InternalName{{Flag: "jobs-exchange"}}, nil, ""},
		{"a namespace-like first segment", []InternalName{{Flag: "dispatch-exchange", Name: "x.dispatch"}}, nil,
			`--dispatch-exchange "x.dispatch" could be published to by the AMQP targets of namespace "x"`},
		{"a family whose prefix is a namespace", []InternalName{{Flag: "retry-queue", Name: "team-a", Family: true}}, nil,
			`--retry-queue "team-a" could be published to by the AMQP targets of namespace "team-a"`},
		{"under RabbitMQ's amq.", []InternalName{{Flag: "dead-exchange", Name: "amq.dead"}}, nil, ""},
		{"on an allow-list", []InternalName{{Flag: "dispatch-exchange", Name: "ops_dispatch"}}, map[string][]string{"alpha": {"ops_dispatch"}},
			`--dispatch-exchange "ops_dispatch" is on the AMQP allow-list of namespace "alpha" ("ops_dispatch")`},
		{"under an allow-listed prefix", []InternalName{{Flag: "dispatch-queue", Name: "ops_dispatch", Family: true}}, map[string][]string{"alpha": {"ops_*"}},
			`--dispatch-queue "ops_dispatch" is on the AMQP allow-list of namespace "alpha" ("ops_*")`},
		{"an allow-list entry in a family", []InternalName{{Flag: "dispatch-queue", Name: "ops_dispatch", Family: true}}, map[string][]string{"alpha": {"ops_dispatch.high"}},
			`is on the AMQP allow-list of namespace "alpha"`},
		{"an allow-list into cronmesh.", nil, map[string][]string{"alpha": {"cronmesh.dispatch"}}, `reaches names reserved for cronmesh`},
		{"an allow-list prefix over cronmesh.", nil, map[string][]string{"alpha": {"cron*"}}, `reaches names reserved for cronmesh`},
		{"an allow-list of no namespace", nil, map[string][]string{"Not_A_Namespace": {"x"}}, `"Not_A_Namespace" is not a namespace`},
		{"a bare star", nil, map[string][]string{"alpha": {"*"}}, `neither a name nor a prefix`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := NewAMQPPolicy(AMQPPolicyOptions{Internal: tt.internal, Allow: tt.allow})
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.NotNil(t, p)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
	require.ErrorContains(t, CheckInternalNames(InternalName{Flag: "queue", Name: "beta.history"}), `namespace "beta"`)
	require.NoError(t, CheckInternalNames(InternalName{Flag: "queue", Name: "cronmesh.history"}))
}

func TestAMQPPolicyRefusal(t *testing.T) {
	t.Parallel()
	p, err := NewAMQPPolicy(AMQPPolicyOptions{
		Internal: []InternalName{
			{Flag: "dispatch-exchange", Name: "ops_dispatch"},
			{Flag: "dispatch-queue", Name: "ops_q", Family: true},
		},
		Allow: map[string][]string{"alpha": {"shared.events", "partners.*"}},
	})
	require.NoError(t, err)
	tests := []struct {
		name                      string
		namespace, exchange, key  string
		wantField, wantReasonPart string
	}{
		{"own exchange, any routing key", "alpha", "alpha.reports", "beta.anything", "", ""},
		{"own queue", "alpha", "", "alpha.inbox", "", ""},
		{"the bare prefix is no name", "alpha", "alpha.", "k", "exchange", "is not the namespace's"},
		{"a longer namespace is another one", "alpha", "alphabet.x", "k", "exchange", "is not the namespace's"},
		{"another namespace's exchange", "alpha", "beta.reports", "k", "exchange", `must start with "alpha."`},
		{"another namespace's queue", "alpha", "", "beta.inbox", "routing_key", `queue "beta.inbox" is not the namespace's`},
		{"cronmesh's exchange", "alpha", "cronmesh.dispatch", "dispatch.high", "exchange", "reserved for cronmesh"},
		{"cronmesh's queue", "alpha", "", "cronmesh.dispatch.high", "routing_key", "reserved for cronmesh"},
		{"the namespace named cronmesh has no prefix", "cronmesh", "cronmesh.mine", "k", "exchange", "reserved for cronmesh"},
		{"the namespace named amq has no prefix", "amq", "amq.topic", "k", "exchange", "is not the namespace's"},
		{"a renamed dispatch exchange", "alpha", "ops_dispatch", "dispatch.high", "exchange", `exchange "ops_dispatch" is reserved`},
		{"a renamed dispatch queue", "alpha", "", "ops_q.high", "routing_key", `queue "ops_q.high" is reserved`},
		{"allow-listed name", "alpha", "shared.events", "k", "", ""},
		{"allow-listed prefix", "alpha", "", "partners.acme", "", ""},
		{"not another namespace's allow-list", "beta", "shared.events", "k", "exchange", "is not the namespace's"},
		{"RabbitMQ's default exchange by name", "alpha", "amq.default", "alpha.q", "exchange", "is not the namespace's"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			field, reason := p.Refusal(tt.namespace, tt.exchange, tt.key)
			require.Equal(t, tt.wantField, field, reason)
			if tt.wantReasonPart == "" {
				require.Empty(t, reason)
				return
			}
			require.Contains(t, reason, tt.wantReasonPart)
		})
	}
	var none *AMQPPolicy
	_, reason := none.Refusal("alpha", "alpha.x", "k")
	require.Equal(t, "AMQP targets are not allowed", reason)
}

func TestParseAllowList(t *testing.T) {
	t.Parallel()
	got, err := ParseAllowList([]string{"alpha=shared.events", " alpha=partners.*", "beta=x"})
	require.NoError(t, err)
	require.Equal(t, map[string][]string{"alpha": {"shared.events", "partners.*"}, "beta": {"x"}}, got)
	for _, bad := range []string{"alpha", "=x", "alpha="} {
		_, err := ParseAllowList([]string{bad})
		require.ErrorContains(t, err, "is not namespace=name", bad)
	}
}
