package evaluate_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/services/alerting/internal/evaluate"
	"github.com/cronmesh/cronmesh/services/alerting/internal/store"
)

func newEvaluator(t *testing.T) (*evaluate.Evaluator, *pgxpool.Pool) {
	t.Helper()
	pool, schema := pgtest.New(t)
	migrations, err := store.Migrations()
	require.NoError(t, err)
	_, err = migrate.ApplyAll(t.Context(), pool, schema, migrations)
	require.NoError(t, err)
	ev, err := evaluate.New(evaluate.Options{Store: store.New(store.Options{Pool: pool})})
	require.NoError(t, err)
	return ev, pool
}

func eventMessage(t *testing.T, events ...*eventsv1.ExecutionEvent) *message.Message {
	t.Helper()
	body, err := proto.Marshal(&eventsv1.ExecutionEventBatch{Events: events})
	require.NoError(t, err)
	return message.NewMessage(uuid.NewString(), body)
}

// TestHandleEvaluatesABatchOfMessagesTogether: an attempt's STARTED and its
// outcome, in two messages of one batch, update the job's row once (one new
// row version, where a message at a time writes two), and the row holds
// what both say: the slot seen and its success.
func TestHandleEvaluatesABatchOfMessagesTogether(t *testing.T) {
	t.Parallel()
	ev, pool := newEvaluator(t)
	nominal := time.Now().UTC().Truncate(time.Second)
	jobID, execID := uuid.NewString(), uuid.NewString()
	event := func(kind eventsv1.ExecutionEventKind) *eventsv1.ExecutionEvent {
		return &eventsv1.ExecutionEvent{
			EventId: uuid.NewString(), Kind: kind, ExecutionId: execID, JobId: jobID, Namespace: "ns", Attempt: 1,
			TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED,
			NominalTime: timestamppb.New(nominal), OccurTime: timestamppb.Now(),
		}
	}
	// The job as its registry event stored it: no run limit.
	_, err := pool.Exec(t.Context(), `INSERT INTO jobs (id, namespace, version, create_time) VALUES ($1, 'ns', 1, now())`, jobID)
	require.NoError(t, err)
	errs, err := ev.Handle(t.Context(), []*message.Message{
		eventMessage(t, event(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED)),
		eventMessage(t, event(eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED)),
	})
	require.NoError(t, err)
	require.Nil(t, errs)

	var seen, success time.Time
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT seen_through, last_success_nominal FROM jobs WHERE id = $1`, jobID).Scan(&seen, &success))
	require.True(t, seen.Equal(nominal), "seen through %s, want %s", seen, nominal)
	require.True(t, success.Equal(nominal), "last success %s, want %s", success, nominal)
	// The test's table is new: the inserted row is at (0,1), its first
	// update at (0,2), a second update would be at (0,3).
	var ctid string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT ctid::text FROM jobs WHERE id = $1`, jobID).Scan(&ctid))
	require.Equal(t, "(0,2)", ctid, "the job's row was updated once")
}

// TestHandleDropsOnlyThePoisonMessage: a message that does not decode is
// poison on its own; the events of the others in its batch are evaluated.
func TestHandleDropsOnlyThePoisonMessage(t *testing.T) {
	t.Parallel()
	ev, pool := newEvaluator(t)
	nominal := time.Now().UTC().Truncate(time.Second)
	jobID := uuid.NewString()
	good := eventMessage(t, &eventsv1.ExecutionEvent{
		EventId: uuid.NewString(), Kind: eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_STARTED, ExecutionId: uuid.NewString(),
		JobId: jobID, Namespace: "ns", Attempt: 1, TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED,
		NominalTime: timestamppb.New(nominal), OccurTime: timestamppb.Now(),
	})
	bad := message.NewMessage(uuid.NewString(), []byte{0xff, 0xff, 0xff})
	errs, err := ev.Handle(t.Context(), []*message.Message{bad, good})
	require.NoError(t, err)
	require.Len(t, errs, 2)
	require.True(t, errors.Is(errs[0], broker.ErrPoison), "the undecodable message is poison: %v", errs[0])
	require.NoError(t, errs[1])
	var seen time.Time
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT seen_through FROM jobs WHERE id = $1`, jobID).Scan(&seen))
	require.True(t, seen.Equal(nominal))
}
