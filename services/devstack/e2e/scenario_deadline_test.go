package e2e_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

// deadlineStopsRetries: a one-time job whose target keeps failing, with
// room for five retries (1 s, 2 s, 4 s, ...) but an execution deadline of
// 5 s, is retried only while a retry would start within the deadline, then
// dead-lettered "deadline exceeded"; the history shows it dead.
func (s *scenario) deadlineStopsRetries(t *testing.T) {
	ctx := t.Context()
	target := newRecorder(t, http.StatusInternalServerError)
	at := time.Now().Truncate(time.Second).Add(4 * time.Second)
	const maxRetries = 5
	created, err := s.jobs.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: &registryv1.Job{
		DisplayName: "scenario deadline",
		Schedule:    &registryv1.Schedule{Kind: &registryv1.Schedule_At{At: timestamppb.New(at)}},
		Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Url: target.URL + "/stale", Timeout: durationpb.New(time.Second),
		}}},
		RetryPolicy: &registryv1.RetryPolicy{
			MaxRetries: proto32(maxRetries), InitialBackoff: durationpb.New(time.Second), MaxBackoff: durationpb.New(4 * time.Second), Multiplier: 2,
		},
		ExecutionDeadline: durationpb.New(5 * time.Second),
	}}))
	require.NoError(t, err)
	jobID := created.Msg.GetJob().GetId()

	var letter *dispatcherv1.DeadLetter
	waitFor(t, 60*time.Second, "the execution in the dead-letter store", func() bool {
		resp, err := s.dispatch.ListDeadLetters(ctx, connect.NewRequest(&dispatcherv1.ListDeadLettersRequest{JobId: jobID}))
		if err != nil || len(resp.Msg.GetDeadLetters()) == 0 {
			return false
		}
		letter = resp.Msg.GetDeadLetters()[0]
		return true
	})
	require.True(t, strings.HasPrefix(letter.GetReason(), "deadline exceeded"), letter.GetReason())
	require.Less(t, letter.GetAttempt(), int32(1+maxRetries), "the deadline stopped the retries before the policy did")
	hits := target.ByID(letter.GetExecutionId())
	require.Len(t, hits, int(letter.GetAttempt()), "no attempt after the dead letter")
	for _, h := range hits {
		// Received, not started: a second of slack for the way there.
		require.Less(t, h.At.Sub(at), 6*time.Second, "an attempt started past the deadline")
	}
	waitFor(t, 30*time.Second, "the execution dead in the history", func() bool {
		list := s.listExecutions(t, &historyv1.ListExecutionsRequest{JobId: jobID})
		return len(list) == 1 && list[0].GetStatus() == historyv1.ExecutionStatus_EXECUTION_STATUS_DEAD
	})
}
