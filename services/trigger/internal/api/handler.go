package api

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	triggerv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1/triggerv1connect"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/reqlimit"
	"github.com/cronmesh/cronmesh/libs/ring"
	"github.com/cronmesh/cronmesh/libs/rpcerr"
	"github.com/cronmesh/cronmesh/services/trigger/internal/firing"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

// Limits of the API.
const (
	DefaultSlotPage = 50
	MaxSlotPage     = 1000
	MaxBackfillRate = 1000
)

// RingReader is the part of the ring the API shows.
type RingReader interface {
	Snapshot(ctx context.Context) (ring.State, error)
}

// Handler implements triggerv1connect.TriggerServiceHandler.
type Handler struct {
	store  *store.Store
	ring   RingReader
	logger *slog.Logger
}

var _ triggerv1connect.TriggerServiceHandler = (*Handler)(nil)

// NewHandler returns a TriggerService handler.
func NewHandler(s *store.Store, r RingReader, logger *slog.Logger) *Handler {
	return &Handler{store: s, ring: r, logger: logger}
}

// GetRing implements TriggerService.GetRing.
func (h *Handler) GetRing(ctx context.Context, _ *connect.Request[triggerv1.GetRingRequest]) (*connect.Response[triggerv1.GetRingResponse], error) {
	if _, err := namespace(ctx); err != nil {
		return nil, err
	}
	state, err := h.ring.Snapshot(ctx)
	if err != nil {
		return nil, h.toConnect(ctx, "GetRing", err)
	}
	owned := map[string]int32{}
	resp := &triggerv1.GetRingResponse{PartitionCount: int32(state.Partitions)}
	for p, o := range state.Owners {
		resp.Partitions = append(resp.Partitions, &triggerv1.Partition{Partition: int32(p), Owner: o.NodeID, Epoch: o.Epoch})
		if o.NodeID != "" {
			owned[o.NodeID]++
		}
	}
	for _, m := range state.Members {
		resp.Members = append(resp.Members, &triggerv1.Member{
			NodeId: m.NodeID, Address: m.Address, JoinTime: timestamppb.New(m.JoinTime), OwnedPartitions: owned[m.NodeID],
		})
	}
	return connect.NewResponse(resp), nil
}

// ListSlots implements TriggerService.ListSlots.
func (h *Handler) ListSlots(ctx context.Context, req *connect.Request[triggerv1.ListSlotsRequest]) (*connect.Response[triggerv1.ListSlotsResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	size := int(req.Msg.PageSize)
	var v rpcerr.Violations
	if size < 0 || size > MaxSlotPage {
		v.Add("page_size", "must be between 0 and 1000")
	}
	reqlimit.ID(&v, "job_id", req.Msg.JobId)
	var before time.Time
	if reqlimit.PageToken(&v, "page_token", req.Msg.PageToken) {
		var ok bool
		if before, ok = decodeSlotToken(req.Msg.PageToken); !ok {
			v.Add("page_token", "is not a token returned by ListSlots")
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	if size == 0 {
		size = DefaultSlotPage
	}
	page, err := h.store.Slots(ctx, ns, req.Msg.JobId, size, before)
	if err != nil {
		return nil, h.toConnect(ctx, "ListSlots", err)
	}
	resp := &triggerv1.ListSlotsResponse{
		NextPageToken: encodeSlotToken(page.Next),
		RunsFired:     page.RunsFired,
		MaxRuns:       page.MaxRuns,
		Completed:     page.Completed(),
	}
	for _, s := range page.Slots {
		state := triggerv1.SlotState_SLOT_STATE_FIRED
		if s.Kind == firing.KindMissed {
			state = triggerv1.SlotState_SLOT_STATE_MISSED
		}
		resp.Slots = append(resp.Slots, &triggerv1.Slot{
			ExecutionId: s.ExecutionID,
			NominalTime: timestamppb.New(s.Nominal),
			RecordTime:  timestamppb.New(s.Record),
			State:       state,
			TriggerKind: store.TriggerKind(s.Kind),
			Epoch:       s.Epoch,
		})
	}
	return connect.NewResponse(resp), nil
}

// BackfillJob implements TriggerService.BackfillJob.
func (h *Handler) BackfillJob(ctx context.Context, req *connect.Request[triggerv1.BackfillJobRequest]) (*connect.Response[triggerv1.BackfillJobResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	var v rpcerr.Violations
	reqlimit.ID(&v, "job_id", req.Msg.JobId)
	if req.Msg.StartTime == nil || req.Msg.StartTime.CheckValid() != nil {
		v.Add("start_time", "is required")
	}
	if req.Msg.EndTime == nil || req.Msg.EndTime.CheckValid() != nil {
		v.Add("end_time", "is required")
	} else if req.Msg.StartTime != nil && !req.Msg.EndTime.AsTime().After(req.Msg.StartTime.AsTime()) {
		v.Add("end_time", "must be after start_time")
	}
	if req.Msg.Rate < 0 || req.Msg.Rate > MaxBackfillRate {
		v.Add("rate", "must be between 0 and 1000 slots per second")
	}
	if _, ok := registryv1.OverlapPolicy_name[int32(req.Msg.OverlapPolicy)]; !ok {
		v.Add("overlap_policy", "unknown overlap policy %d", req.Msg.OverlapPolicy)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	res, err := h.store.Backfill(ctx, ns, req.Msg.JobId, req.Msg.StartTime.AsTime(), req.Msg.EndTime.AsTime(), int(req.Msg.Rate), req.Msg.OverlapPolicy)
	if err != nil {
		return nil, h.toConnect(ctx, "BackfillJob", err)
	}
	return connect.NewResponse(&triggerv1.BackfillJobResponse{Fired: int32(res.Fired), Skipped: int32(res.Skipped)}), nil
}

func namespace(ctx context.Context) (string, error) {
	ns, ok := apikey.NamespaceFrom(ctx)
	if !ok {
		return "", connect.NewError(connect.CodeUnauthenticated, errors.New("no authenticated namespace"))
	}
	return ns, nil
}

// Slot page tokens carry the nominal time the next page starts before,
// opaque to clients.
func encodeSlotToken(before time.Time) string {
	if before.IsZero() {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(before.UnixMicro(), 10)))
}

func decodeSlotToken(token string) (time.Time, bool) {
	if token == "" {
		return time.Time{}, true
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return time.Time{}, false
	}
	micros, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMicro(micros).UTC(), true
}
