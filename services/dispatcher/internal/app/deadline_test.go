package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	"github.com/cronmesh/cronmesh/libs/execid"
)

// TestRedriveClearsTheDeadline: an execution dead-lettered for its
// deadline is delivered when an operator redrives it, stale or not.
func TestRedriveClearsTheDeadline(t *testing.T) {
	t.Parallel()
	d := startDispatcher(t)
	alpha := d.client(keyAlpha)
	job, nominal := uuid.NewString(), time.Now().Add(-2*time.Hour).Truncate(time.Second)
	req := d.request("alpha", job, "https://a.example/ok", nominal)
	req.DeadlineTime = timestamppb.New(nominal.Add(time.Hour))
	d.publish(t, req)

	require.Eventually(t, func() bool { return len(listAll(t, alpha, job)) == 1 }, 30*time.Second, 20*time.Millisecond)
	dl := listAll(t, alpha, job)[0]
	require.True(t, strings.HasPrefix(dl.Reason, "deadline exceeded: "), dl.Reason)
	require.Empty(t, d.target.of(req.ExecutionId), "no attempt past the deadline")

	_, err := alpha.RedriveDeadLetter(context.Background(), connect.NewRequest(&dispatcherv1.RedriveDeadLetterRequest{Id: dl.Id}))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return d.events.has(req.ExecutionId, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_SUCCEEDED)
	}, 30*time.Second, 10*time.Millisecond)
	calls := d.target.of(execid.For(job, nominal))
	require.Len(t, calls, 1)
	require.Nil(t, calls[0].DeadlineTime)
	require.Nil(t, calls[0].NextSlotTime)
}
