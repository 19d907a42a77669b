package main

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/cronmesh/cronmesh/bench/internal/eventmix"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/execevent"
)

// TestIngestMessagesMakeTheDispatchersMix checks the generator without a
// broker: one SUCCEEDED per quick execution, a STARTED in an earlier
// message and then a SUCCEEDED for a slow one, and the counts the report
// gives.
func TestIngestMessagesMakeTheDispatchersMix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		share float64
		slow  int
	}{
		{name: "production", share: eventmix.DefaultSlowShare, slow: 24},
		{name: "every attempt slow, the old mix", share: 1, slow: 1250},
		{name: "none slow", share: 0, slow: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mix, err := eventmix.NewMix(tc.share)
			require.NoError(t, err)
			o := options{events: 2500, batch: 100}
			plan := ingestMessages(o, mix)
			require.Len(t, plan.keys, len(plan.bodies))

			type seen struct{ started, outcome, startedAt, outcomeAt int }
			byExecution := map[string]*seen{}
			events := 0
			for m, body := range plan.bodies {
				var batch eventsv1.ExecutionEventBatch
				require.NoError(t, proto.Unmarshal(body, &batch))
				require.NotEmpty(t, batch.GetEvents())
				require.LessOrEqual(t, len(batch.GetEvents()), o.batch+1, "message %d", m)
				require.Equal(t, execevent.RoutingKey(batch.GetEvents()), plan.keys[m])
				for _, ev := range batch.GetEvents() {
					events++
					s := byExecution[ev.GetExecutionId()]
					if s == nil {
						s = &seen{}
						byExecution[ev.GetExecutionId()] = s
					}
					require.NotNil(t, ev.GetStartTime(), "every event carries the start")
					switch ev.GetKind() {
					case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED:
						s.started++
						s.startedAt = m
					case eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED:
						s.outcome++
						s.outcomeAt = m
					default:
						t.Fatalf("unexpected kind %v", ev.GetKind())
					}
				}
			}
			require.Equal(t, plan.events, events)
			require.GreaterOrEqual(t, plan.events, o.events)
			require.LessOrEqual(t, plan.events, o.events+1)
			require.Len(t, byExecution, plan.executions)
			require.Equal(t, tc.slow, plan.slowExec)

			slow := 0
			for id, s := range byExecution {
				require.Equal(t, 1, s.outcome, "execution %s: one outcome", id)
				if s.started > 0 {
					slow++
					require.Equal(t, 1, s.started, "execution %s", id)
					require.Less(t, s.startedAt, s.outcomeAt, "execution %s: STARTED before its outcome", id)
				}
			}
			require.Equal(t, tc.slow, slow)
		})
	}
}
