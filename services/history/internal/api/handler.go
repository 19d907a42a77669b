package api

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/reqlimit"
	"github.com/cronmesh/cronmesh/libs/rpcerr"
	"github.com/cronmesh/cronmesh/services/history/internal/store"
	"github.com/cronmesh/cronmesh/services/history/internal/tracelink"
)

// Limits of the API.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
	// MinQueryLength: a trigram index cannot narrow a search for fewer
	// than 3 characters, which would scan every row of the range.
	MinQueryLength = 3
	MaxQueryLength = 200
	// DefaultStatsWindow is GetJobStats' window when none is given.
	DefaultStatsWindow = 24 * time.Hour
	// MaxStatsWindow bounds the rows one GetJobStats aggregates.
	MaxStatsWindow = 400 * 24 * time.Hour
)

// Store is what the handler reads; *store.Store is one.
type Store interface {
	List(ctx context.Context, f store.ListFilter) ([]*historyv1.Execution, string, error)
	Get(ctx context.Context, namespace, id string) (*historyv1.Execution, []*historyv1.Attempt, error)
	JobStats(ctx context.Context, namespace, jobID string, start, end time.Time) (store.Stats, error)
}

// Options for NewHandler.
type Options struct {
	// Store is required.
	Store Store
	// Clock gives GetJobStats' default window. Default clock.Real.
	Clock clock.Clock
	// Logger receives internal errors; nil discards.
	Logger *slog.Logger
	// TraceLinks fills each execution's trace_url; nil leaves it empty.
	TraceLinks *tracelink.Template
}

// Handler implements historyv1connect.HistoryServiceHandler.
type Handler struct {
	store      Store
	clock      clock.Clock
	logger     *slog.Logger
	traceLinks *tracelink.Template
}

var _ historyv1connect.HistoryServiceHandler = (*Handler)(nil)

// NewHandler validates opts and fills the defaults.
func NewHandler(opts Options) (*Handler, error) {
	if opts.Store == nil {
		return nil, errors.New("api: Store is required")
	}
	h := &Handler{store: opts.Store, clock: opts.Clock, logger: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)), traceLinks: opts.TraceLinks}
	if h.clock == nil {
		h.clock = clock.Real{}
	}
	return h, nil
}

func namespace(ctx context.Context) (string, error) {
	ns, ok := apikey.NamespaceFrom(ctx)
	if !ok {
		return "", connect.NewError(connect.CodeUnauthenticated, errors.New("no authenticated namespace"))
	}
	return ns, nil
}

// timeRange validates an optional [start, end) pair of request fields.
func timeRange(v *rpcerr.Violations, start, end *timestamppb.Timestamp) (time.Time, time.Time) {
	var s, e time.Time
	if start != nil {
		if err := start.CheckValid(); err != nil {
			v.Add("start_time", "not a valid timestamp")
		} else {
			s = start.AsTime()
		}
	}
	if end != nil {
		if err := end.CheckValid(); err != nil {
			v.Add("end_time", "not a valid timestamp")
		} else {
			e = end.AsTime()
		}
	}
	if !s.IsZero() && !e.IsZero() && !s.Before(e) {
		v.Add("end_time", "must be after start_time")
	}
	return s, e
}

// ListExecutions pages through the caller's executions, newest first.
func (h *Handler) ListExecutions(ctx context.Context, req *connect.Request[historyv1.ListExecutionsRequest]) (*connect.Response[historyv1.ListExecutionsResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	var v rpcerr.Violations
	f := store.ListFilter{Namespace: ns, JobID: m.GetJobId(), PageToken: m.GetPageToken()}
	reqlimit.ID(&v, "job_id", f.JobID)
	reqlimit.PageToken(&v, "page_token", f.PageToken)
	if !reqlimit.Count(&v, "statuses", len(m.GetStatuses()), reqlimit.MaxEnumFilter) ||
		!reqlimit.Count(&v, "trigger_kinds", len(m.GetTriggerKinds()), reqlimit.MaxEnumFilter) {
		return nil, v.Err()
	}
	for _, s := range m.GetStatuses() {
		if !store.ValidStatus(store.Status(s)) {
			v.Add("statuses", "%v is not a status an execution can have", s)
			break
		}
		f.Statuses = append(f.Statuses, store.Status(s))
	}
	for _, k := range m.GetTriggerKinds() {
		if k <= dispatchv1.TriggerKind_TRIGGER_KIND_UNSPECIFIED || k > dispatchv1.TriggerKind_TRIGGER_KIND_CATCH_UP {
			v.Add("trigger_kinds", "%v is not a trigger kind", k)
			break
		}
		f.TriggerKinds = append(f.TriggerKinds, int16(k))
	}
	f.Start, f.End = timeRange(&v, m.GetStartTime(), m.GetEndTime())
	if q := m.GetQuery(); q != "" {
		if n := utf8.RuneCountInString(q); n < MinQueryLength || n > MaxQueryLength {
			v.Add("query", "must be %d to %d characters", MinQueryLength, MaxQueryLength)
		}
		f.Query = q
	}
	switch size := m.GetPageSize(); {
	case size < 0 || size > MaxPageSize:
		v.Add("page_size", "must be 0 (the default, %d) to %d", DefaultPageSize, MaxPageSize)
	case size == 0:
		f.Limit = DefaultPageSize
	default:
		f.Limit = int(size)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	list, next, err := h.store.List(ctx, f)
	if err != nil {
		return nil, h.toConnect(ctx, "ListExecutions", err)
	}
	for _, e := range list {
		h.link(e)
	}
	return connect.NewResponse(&historyv1.ListExecutionsResponse{Executions: list, NextPageToken: next}), nil
}

// GetExecution returns one of the caller's executions with its attempts.
func (h *Handler) GetExecution(ctx context.Context, req *connect.Request[historyv1.GetExecutionRequest]) (*connect.Response[historyv1.GetExecutionResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	var v rpcerr.Violations
	if req.Msg.GetExecutionId() == "" {
		v.Add("execution_id", "required")
	}
	if reqlimit.ID(&v, "execution_id", req.Msg.GetExecutionId()); !v.Empty() {
		return nil, v.Err()
	}
	e, attempts, err := h.store.Get(ctx, ns, req.Msg.GetExecutionId())
	if err != nil {
		return nil, h.toConnect(ctx, "GetExecution", err)
	}
	h.link(e)
	return connect.NewResponse(&historyv1.GetExecutionResponse{Execution: e, Attempts: attempts}), nil
}

// GetJobStats summarises one of the caller's jobs over a window.
func (h *Handler) GetJobStats(ctx context.Context, req *connect.Request[historyv1.GetJobStatsRequest]) (*connect.Response[historyv1.GetJobStatsResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	var v rpcerr.Violations
	if m.GetJobId() == "" {
		v.Add("job_id", "required")
	} else {
		reqlimit.ID(&v, "job_id", m.GetJobId())
	}
	start, end := timeRange(&v, m.GetStartTime(), m.GetEndTime())
	if end.IsZero() {
		end = h.clock.Now().UTC()
	}
	if start.IsZero() {
		start = end.Add(-DefaultStatsWindow)
	}
	if v.Empty() && !start.Before(end) {
		v.Add("start_time", "must be before end_time (default now)")
	}
	if end.Sub(start) > MaxStatsWindow {
		v.Add("start_time", "the window may be at most %v", MaxStatsWindow)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	st, err := h.store.JobStats(ctx, ns, m.GetJobId(), start, end)
	if err != nil {
		return nil, h.toConnect(ctx, "GetJobStats", err)
	}
	h.link(st.LastRun)
	res := &historyv1.GetJobStatsResponse{
		LastRun: st.LastRun, Runs: st.Runs, Successes: st.Successes, Failures: st.Failures, Missed: st.Missed, Skipped: st.Skipped,
		StartTime: timestamppb.New(start), EndTime: timestamppb.New(end),
	}
	if st.P50 != nil {
		res.DurationP50, res.DurationP95, res.DurationP99 = durationpb.New(*st.P50), durationpb.New(*st.P95), durationpb.New(*st.P99)
	}
	return connect.NewResponse(res), nil
}

// link fills e's trace_url from its trace id. It is computed on every read,
// never stored, so a changed template applies to the whole history.
func (h *Handler) link(e *historyv1.Execution) {
	if e != nil {
		e.TraceUrl = h.traceLinks.URL(e.GetTraceId())
	}
}
