package cli

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1/dispatcherv1connect"
	triggerv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1/triggerv1connect"
)

// fakeTrigger records the requests; ListSlots serves three pages of two.
type fakeTrigger struct {
	triggerv1connect.UnimplementedTriggerServiceHandler
	slots     []*triggerv1.ListSlotsRequest
	backfills []*triggerv1.BackfillJobRequest
}

func (f *fakeTrigger) ListSlots(_ context.Context, req *connect.Request[triggerv1.ListSlotsRequest]) (*connect.Response[triggerv1.ListSlotsResponse], error) {
	f.slots = append(f.slots, req.Msg)
	page := len(f.slots)
	var slots []*triggerv1.Slot
	for i := range min(int(req.Msg.GetPageSize()), 2) {
		slots = append(slots, &triggerv1.Slot{
			ExecutionId: fmt.Sprintf("e%d-%d", page, i), NominalTime: timestamppb.New(time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)),
			RecordTime: timestamppb.New(time.Date(2030, 1, 2, 3, 0, 1, 0, time.UTC)), State: triggerv1.SlotState_SLOT_STATE_FIRED,
			TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_CATCH_UP, Epoch: 7,
		})
	}
	next := ""
	if page < 3 {
		next = fmt.Sprintf("p%d", page+1)
	}
	return connect.NewResponse(&triggerv1.ListSlotsResponse{Slots: slots, NextPageToken: next, RunsFired: 3, MaxRuns: 3, Completed: true}), nil
}

func (f *fakeTrigger) BackfillJob(_ context.Context, req *connect.Request[triggerv1.BackfillJobRequest]) (*connect.Response[triggerv1.BackfillJobResponse], error) {
	f.backfills = append(f.backfills, req.Msg)
	return connect.NewResponse(&triggerv1.BackfillJobResponse{Fired: 22, Skipped: 2}), nil
}

// fakeCancels answers CancelExecution: the first call in flight, the
// next ones already cancelled.
type fakeCancels struct {
	dispatcherv1connect.UnimplementedDispatchServiceHandler
	ids []string
}

func (f *fakeCancels) CancelExecution(_ context.Context, req *connect.Request[dispatcherv1.CancelExecutionRequest]) (*connect.Response[dispatcherv1.CancelExecutionResponse], error) {
	if req.Msg.GetExecutionId() == "bad" {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("execution_id: is not an execution id (a UUID)"))
	}
	f.ids = append(f.ids, req.Msg.GetExecutionId())
	if len(f.ids) == 1 {
		return connect.NewResponse(&dispatcherv1.CancelExecutionResponse{Stage: dispatcherv1.CancelStage_CANCEL_STAGE_IN_FLIGHT}), nil
	}
	return connect.NewResponse(&dispatcherv1.CancelExecutionResponse{Stage: dispatcherv1.CancelStage_CANCEL_STAGE_RECORDED, AlreadyCancelled: true}), nil
}

func TestSlotsBackfillCancel(t *testing.T) {
	t.Parallel()
	trigger, cancels := &fakeTrigger{}, &fakeCancels{}
	mux := http.NewServeMux()
	mux.Handle(triggerv1connect.NewTriggerServiceHandler(trigger))
	mux.Handle(dispatcherv1connect.NewDispatchServiceHandler(cancels))
	srv := newH2CServer(t, mux)
	env := map[string]string{"CRONMESH_TRIGGER_URL": srv.URL, "CRONMESH_DISPATCHER_URL": srv.URL}

	out, errOut, code := runAgainst(t, srv, env, "slots", "J", "--limit", "5")
	require.Equal(t, ExitOK, code, errOut)
	require.Len(t, trigger.slots, 3, "pages are followed up to the limit")
	assert.Equal(t, []int32{5, 3, 1}, []int32{trigger.slots[0].GetPageSize(), trigger.slots[1].GetPageSize(), trigger.slots[2].GetPageSize()})
	assert.Equal(t, "p2", trigger.slots[1].GetPageToken())
	assert.Regexp(t, `^EXECUTION\s+NOMINAL TIME\s+STATE\s+TRIGGER\s+RECORDED\s+EPOCH\n`, out)
	assert.Regexp(t, `(?m)^e1-0\s+2030-01-02T03:00:00Z\s+fired\s+catch-up\s+2030-01-02T03:00:01Z\s+7$`, out)
	assert.Contains(t, out, "e3-0")
	assert.Regexp(t, `(?m)^runs: 3 of 3 \(completed: no more scheduled runs until max_runs is raised\)$`, out)

	_, errOut, code = runAgainst(t, srv, env, "slots", "J", "--limit", "0")
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, errOut, "--limit")

	out, errOut, code = runAgainst(t, srv, env, "backfill", "J", "--from", "2030-01-01T00:00:00Z", "--to", "6h", "--rate", "10")
	require.Equal(t, ExitOK, code, errOut)
	require.Len(t, trigger.backfills, 1)
	b := trigger.backfills[0]
	assert.Equal(t, "J", b.GetJobId())
	assert.EqualValues(t, 10, b.GetRate())
	assert.True(t, b.GetStartTime().AsTime().Equal(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)))
	assert.True(t, b.GetEndTime().AsTime().Equal(time.Date(2030, 1, 2, 6, 0, 0, 0, time.UTC)), "a duration ago, from the fixed now")
	assert.Regexp(t, `(?m)^fired:\s+22$`, out)
	assert.Regexp(t, `(?m)^already in the ledger:\s+2$`, out)

	_, _, code = runAgainst(t, srv, env, "backfill", "J", "--from", "24h")
	require.Equal(t, ExitOK, code)
	assert.True(t, trigger.backfills[1].GetEndTime().AsTime().Equal(time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC)), "--to defaults to now")
	for _, args := range [][]string{
		{"backfill", "J"},
		{"backfill", "J", "--from", "1h", "--to", "2h"},
		{"backfill", "J", "--from", "1h", "--rate", "1001"},
		{"backfill", "--from", "1h"},
	} {
		_, _, code = runAgainst(t, srv, env, args...)
		assert.Equal(t, ExitUsage, code, "%v", args)
	}
	assert.Len(t, trigger.backfills, 2, "nothing sent for a usage error")

	out, errOut, code = runAgainst(t, srv, env, "cancel", "0190f1e2-0000-7000-8000-000000000001")
	require.Equal(t, ExitOK, code, errOut)
	assert.Equal(t, []string{"0190f1e2-0000-7000-8000-000000000001"}, cancels.ids)
	assert.Regexp(t, `(?m)^stage:\s+in-flight$`, out)
	assert.Regexp(t, `(?m)^already cancelled:\s+false$`, out)
	out, errOut, code = runAgainst(t, srv, env, "cancel", "0190f1e2-0000-7000-8000-000000000001", "-o", "json")
	require.Equal(t, ExitOK, code, errOut)
	assert.Contains(t, out, `"alreadyCancelled": true`)
	assert.Contains(t, out, `"stage": "CANCEL_STAGE_RECORDED"`)
	_, errOut, code = runAgainst(t, srv, env, "cancel", "bad")
	assert.Equal(t, ExitError, code)
	assert.Contains(t, errOut, "invalid_argument")
	_, _, code = runAgainst(t, srv, env, "cancel")
	assert.Equal(t, ExitUsage, code)
}
