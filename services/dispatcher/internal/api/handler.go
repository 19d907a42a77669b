package api

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1/dispatcherv1connect"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/reqlimit"
	"github.com/cronmesh/cronmesh/libs/rpcerr"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/inflight"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/pipeline"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

// Limits of the API.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
	// MaxRedrive is how many dead letters one RedriveDeadLetters call
	// redrives at most.
	MaxRedrive = 1000
	// DefaultPublishTimeout bounds the broker's confirm of one redrive.
	DefaultPublishTimeout = 10 * time.Second
	// redriveParallelism is how many redrives of one RedriveDeadLetters
	// call are on the wire at once (each waits for its confirm).
	redriveParallelism = 16
)

// Store is the persistence the API needs; *store.Store is one.
type Store interface {
	ListDeadLetters(ctx context.Context, namespace, jobID string, limit int, after store.Cursor) ([]store.DeadLetter, store.Cursor, error)
	Redrive(ctx context.Context, namespace, id string, publish func(context.Context, store.DeadLetter) error) (store.DeadLetter, error)
	RedriveMany(ctx context.Context, namespace, jobID string, limit int, publish func(context.Context, []store.DeadLetter) []error) (int, error)
	PurgeDeadLetter(ctx context.Context, namespace, id string) error
	RecordCancellation(ctx context.Context, namespace, executionID string, now time.Time) (bool, error)
}

// Canceller makes a recorded cancellation effective on this replica at
// once and says whether an attempt was in flight here; *inflight.Watcher
// is one.
type Canceller interface {
	Cancel(ref inflight.Ref) (abortedHere bool)
}

// Options for NewHandler.
type Options struct {
	// Store holds the dead letters and cancellations. Required.
	Store Store
	// Publisher publishes redriven requests with confirms, to topics made
	// by broker.Route. Required.
	Publisher message.Publisher
	// DispatchExchange receives redriven requests (routing key
	// "dispatch.<priority>"). Default pipeline.DefaultDispatchExchange.
	DispatchExchange string
	// Propagator writes the caller's trace context into redriven requests,
	// so the redelivery joins the redrive's trace. Default
	// propagation.TraceContext.
	Propagator propagation.TextMapPropagator
	// PublishTimeout bounds one redrive's confirm. Default
	// DefaultPublishTimeout.
	PublishTimeout time.Duration
	// Targets checks a redrive's target_override as the registry checks a
	// job's target. Required.
	Targets *targetcheck.Checker
	// Cancels, if non-nil, is told of every cancellation once it is
	// recorded: an attempt in flight on this replica is aborted without
	// waiting for the cancellation feed. Nil leaves it to the feed.
	Cancels Canceller
	// Clock gives cancellation times. Default clock.Real.
	Clock clock.Clock
	// Logger receives internal errors. Nil discards.
	Logger *slog.Logger
}

// Handler implements dispatcherv1connect.DispatchServiceHandler.
type Handler struct {
	opts   Options
	logger *slog.Logger
}

var _ dispatcherv1connect.DispatchServiceHandler = (*Handler)(nil)

// NewHandler validates opts and applies the defaults.
func NewHandler(opts Options) (*Handler, error) {
	switch {
	case opts.Store == nil:
		return nil, errors.New("api: Store is required")
	case opts.Publisher == nil:
		return nil, errors.New("api: Publisher is required")
	case opts.Targets == nil:
		return nil, errors.New("api: Targets is required")
	case opts.PublishTimeout < 0:
		return nil, errors.New("api: PublishTimeout must not be negative")
	}
	opts.DispatchExchange = cmp.Or(opts.DispatchExchange, pipeline.DefaultDispatchExchange)
	opts.PublishTimeout = cmp.Or(opts.PublishTimeout, DefaultPublishTimeout)
	if opts.Propagator == nil {
		opts.Propagator = propagation.TraceContext{}
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	return &Handler{opts: opts, logger: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))}, nil
}

// ListDeadLetters implements DispatchService.ListDeadLetters: newest
// first, by (dead time, id), with an opaque page token that stays valid
// while dead letters come and go (it is a position, not an offset).
func (h *Handler) ListDeadLetters(ctx context.Context, req *connect.Request[dispatcherv1.ListDeadLettersRequest]) (*connect.Response[dispatcherv1.ListDeadLettersResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	var violations []*errdetails.BadRequest_FieldViolation
	size := int(req.Msg.PageSize)
	if size < 0 || size > MaxPageSize {
		violations = append(violations, violation("page_size", fmt.Sprintf("must be between 0 and %d", MaxPageSize)))
	}
	if req.Msg.JobId != "" && !isUUID(req.Msg.JobId) {
		violations = append(violations, violation("job_id", "is not a job id (a UUID)"))
	}
	after, ok := decodeToken(req.Msg.PageToken)
	if tooLong := overCap("page_token", req.Msg.PageToken, reqlimit.MaxPageTokenBytes); tooLong != nil {
		violations = append(violations, tooLong)
	} else if !ok {
		violations = append(violations, violation("page_token", "is not a token returned by ListDeadLetters"))
	}
	if len(violations) > 0 {
		return nil, invalid(violations)
	}
	letters, next, err := h.opts.Store.ListDeadLetters(ctx, ns, req.Msg.JobId, cmp.Or(size, DefaultPageSize), after)
	if err != nil {
		return nil, h.toConnect(ctx, "ListDeadLetters", err)
	}
	resp := &dispatcherv1.ListDeadLettersResponse{NextPageToken: encodeToken(next)}
	for _, d := range letters {
		resp.DeadLetters = append(resp.DeadLetters, toProto(d))
	}
	return connect.NewResponse(resp), nil
}

// RedriveDeadLetter implements DispatchService.RedriveDeadLetter: the dead
// letter's request, as the first attempt of a new series with the same
// execution id (targets deduplicate on it) and optionally another target, goes to the dispatch
// exchange; the dead letter is deleted once the broker confirmed it.
func (h *Handler) RedriveDeadLetter(ctx context.Context, req *connect.Request[dispatcherv1.RedriveDeadLetterRequest]) (*connect.Response[dispatcherv1.RedriveDeadLetterResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	v := &rpcerr.Violations{}
	if req.Msg.Id == "" {
		v.Add("id", "is required")
	} else {
		reqlimit.ID(v, "id", req.Msg.Id)
	}
	if o := req.Msg.TargetOverride; o != nil {
		// What does not depend on the dead letter is refused before it is
		// taken; checkOverride checks the completed target again.
		h.opts.Targets.Partial(v, "target_override", ns, proto.Clone(o).(*registryv1.Target))
	}
	if !v.Empty() {
		return nil, v.Err()
	}
	letter, err := h.opts.Store.Redrive(ctx, ns, req.Msg.Id, func(ctx context.Context, d store.DeadLetter) error {
		target := d.Request.GetTarget()
		if o := req.Msg.TargetOverride; o != nil {
			checked, err := h.checkOverride(ns, o, target)
			if err != nil {
				return err
			}
			target = checked
		}
		return h.publish(ctx, redriven(d.Request, target))
	})
	if err != nil {
		return nil, h.toConnect(ctx, "RedriveDeadLetter", err)
	}
	return connect.NewResponse(&dispatcherv1.RedriveDeadLetterResponse{ExecutionId: letter.ExecutionID}), nil
}

// RedriveDeadLetters implements DispatchService.RedriveDeadLetters: up to
// MaxRedrive dead letters of the job (or namespace), oldest first. When
// some publishes fail, the ones that went out are deleted and counted and
// the call succeeds with that count (call again for the rest); when none
// went out it fails with Unavailable.
func (h *Handler) RedriveDeadLetters(ctx context.Context, req *connect.Request[dispatcherv1.RedriveDeadLettersRequest]) (*connect.Response[dispatcherv1.RedriveDeadLettersResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	if req.Msg.JobId != "" && !isUUID(req.Msg.JobId) {
		return nil, invalid([]*errdetails.BadRequest_FieldViolation{violation("job_id", "is not a job id (a UUID)")})
	}
	n, err := h.opts.Store.RedriveMany(ctx, ns, req.Msg.JobId, MaxRedrive, func(ctx context.Context, letters []store.DeadLetter) []error {
		errs := make([]error, len(letters))
		sem := make(chan struct{}, redriveParallelism)
		var wg sync.WaitGroup
		for i, d := range letters {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				errs[i] = h.publish(ctx, redriven(d.Request, d.Request.GetTarget()))
			})
		}
		wg.Wait()
		return errs
	})
	if err != nil && n == 0 {
		return nil, h.toConnect(ctx, "RedriveDeadLetters", err)
	}
	if err != nil {
		h.logger.WarnContext(ctx, "some dead letters could not be redriven", slog.Int("redriven", n), slog.Any("error", err))
	}
	return connect.NewResponse(&dispatcherv1.RedriveDeadLettersResponse{Redriven: int32(n)}), nil
}

// PurgeDeadLetter implements DispatchService.PurgeDeadLetter.
func (h *Handler) PurgeDeadLetter(ctx context.Context, req *connect.Request[dispatcherv1.PurgeDeadLetterRequest]) (*connect.Response[dispatcherv1.PurgeDeadLetterResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	if req.Msg.Id == "" {
		return nil, invalid([]*errdetails.BadRequest_FieldViolation{violation("id", "is required")})
	}
	if tooLong := overCap("id", req.Msg.Id, reqlimit.MaxIDBytes); tooLong != nil {
		return nil, invalid([]*errdetails.BadRequest_FieldViolation{tooLong})
	}
	if err := h.opts.Store.PurgeDeadLetter(ctx, ns, req.Msg.Id); err != nil {
		return nil, h.toConnect(ctx, "PurgeDeadLetter", err)
	}
	return connect.NewResponse(&dispatcherv1.PurgeDeadLetterResponse{}), nil
}

// CancelExecution implements DispatchService.CancelExecution: idempotent;
// an execution id the dispatcher never saw is recorded all the same (it may
// be on its way), so the call cannot tell a caller whether it existed. The
// record is committed before the answer (it survives a restart) and is
// keyed by the caller's namespace: another namespace's execution of the
// same id never matches it. The stage is IN_FLIGHT when this replica had
// an attempt running (aborted now), RECORDED otherwise (package inflight
// carries the cancel to the other replicas).
func (h *Handler) CancelExecution(ctx context.Context, req *connect.Request[dispatcherv1.CancelExecutionRequest]) (*connect.Response[dispatcherv1.CancelExecutionResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	switch {
	case req.Msg.ExecutionId == "":
		return nil, invalid([]*errdetails.BadRequest_FieldViolation{violation("execution_id", "is required")})
	case !isUUID(req.Msg.ExecutionId):
		return nil, invalid([]*errdetails.BadRequest_FieldViolation{violation("execution_id", "is not an execution id (a UUID)")})
	}
	recorded, err := h.opts.Store.RecordCancellation(ctx, ns, req.Msg.ExecutionId, h.opts.Clock.Now())
	if err != nil {
		return nil, h.toConnect(ctx, "CancelExecution", err)
	}
	res := &dispatcherv1.CancelExecutionResponse{Stage: dispatcherv1.CancelStage_CANCEL_STAGE_RECORDED, AlreadyCancelled: !recorded}
	if h.opts.Cancels != nil && h.opts.Cancels.Cancel(inflight.Ref{Namespace: ns, ExecutionID: uuid.MustParse(req.Msg.ExecutionId).String()}) {
		res.Stage = dispatcherv1.CancelStage_CANCEL_STAGE_IN_FLIGHT
	}
	return connect.NewResponse(res), nil
}

// publish sends a redriven request to its priority's dispatch queue and
// waits for the confirm; a failure wraps errBroker.
func (h *Handler) publish(ctx context.Context, req *dispatchv1.DispatchRequest) error {
	body, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode redrive of %s: %w", req.ExecutionId, err)
	}
	ctx, cancel := context.WithTimeout(ctx, h.opts.PublishTimeout)
	defer cancel()
	msg := message.NewMessage(req.ExecutionId, body)
	broker.InjectTrace(ctx, h.opts.Propagator, msg.Metadata)
	msg.SetContext(ctx)
	if err := h.opts.Publisher.Publish(pipeline.DispatchRoute(h.opts.DispatchExchange, req.Priority), msg); err != nil {
		return fmt.Errorf("%w: redrive of %s: %w", errBroker, req.ExecutionId, err)
	}
	return nil
}

// checkOverride is a redrive's target_override as it will be delivered:
// completed with the dead letter's secrets where the rules of
// targetcheck.KeepSecrets allow, then checked as the registry checks a
// job's target (limits, forbidden headers such as traceparent, AMQP
// names the namespace may publish to). A violation is InvalidArgument
// naming the target_override field.
func (h *Handler) checkOverride(namespace string, override, last *registryv1.Target) (*registryv1.Target, error) {
	target := proto.Clone(override).(*registryv1.Target)
	v := &rpcerr.Violations{}
	targetcheck.MoveCredentialHeaders(target)
	targetcheck.KeepSecrets(v, "target_override", target, last, false)
	h.opts.Targets.Target(v, "target_override", namespace, target)
	if !v.Empty() {
		return nil, v.Err()
	}
	return target, nil
}

// redriven is the request that redrives a dead letter's: a new series of
// attempts of the same execution (same webhook-id), to target.
//
// The series starts at the attempt after the dead letter's last rather than
// at 1: history and alerting identify a lifecycle event by (execution_id,
// attempt, kind), and the history shows an execution's event of the
// greatest attempt. Starting again at 1 made the redrive's events look
// like old ones (its SUCCEEDED at attempt 1 lost to the DEAD at attempt 3,
// so the history kept showing DEAD after a successful redrive).
// first_attempt makes the retry policy count from the new series' start.
// The deadlines are cleared: a redrive is an operator's deliberate choice
// to deliver the execution now, stale or not (a dead letter of "deadline
// exceeded" would otherwise be dead-lettered again at once).
func redriven(last *dispatchv1.DispatchRequest, target *registryv1.Target) *dispatchv1.DispatchRequest {
	req := proto.Clone(last).(*dispatchv1.DispatchRequest)
	req.Attempt = max(last.GetAttempt(), 0) + 1
	req.FirstAttempt = req.Attempt
	req.Target = proto.Clone(target).(*registryv1.Target)
	req.DeadlineTime, req.NextSlotTime = nil, nil
	return req
}

// overCap is the violation of a field longer than maxBytes, or nil.
func overCap(field, s string, maxBytes int) *errdetails.BadRequest_FieldViolation {
	if len(s) <= maxBytes {
		return nil
	}
	return violation(field, fmt.Sprintf("must be at most %d bytes, got %d", maxBytes, len(s)))
}

// toProto is the API form of a dead letter: its request without the
// signing secret and the secret header values.
func toProto(d store.DeadLetter) *dispatcherv1.DeadLetter {
	pb := &dispatcherv1.DeadLetter{
		Id:              d.ID,
		ExecutionId:     d.ExecutionID,
		JobId:           d.JobID,
		Attempt:         d.Attempt,
		DeadTime:        timestamppb.New(d.DeadTime),
		Reason:          d.Reason,
		ResponseStatus:  d.ResponseStatus,
		ResponseExcerpt: d.ResponseExcerpt,
		Request:         store.StripSecret(d.Request),
	}
	if !d.NominalTime.IsZero() {
		pb.NominalTime = timestamppb.New(d.NominalTime)
	}
	return pb
}

func namespace(ctx context.Context) (string, error) {
	ns, ok := apikey.NamespaceFrom(ctx)
	if !ok {
		return "", connect.NewError(connect.CodeUnauthenticated, errors.New("no authenticated namespace"))
	}
	return ns, nil
}

func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil
}

// Page tokens carry the position the next page starts after ("<dead time
// in Unix microseconds>.<id>"), opaque to clients.
func encodeToken(c store.Cursor) string {
	if c.IsZero() {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.DeadTime.UnixMicro(), 10) + "." + c.ID))
}

func decodeToken(token string) (store.Cursor, bool) {
	if token == "" {
		return store.Cursor{}, true
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return store.Cursor{}, false
	}
	micros, id, ok := strings.Cut(string(raw), ".")
	if !ok || !isUUID(id) {
		return store.Cursor{}, false
	}
	n, err := strconv.ParseInt(micros, 10, 64)
	if err != nil {
		return store.Cursor{}, false
	}
	return store.Cursor{DeadTime: time.UnixMicro(n).UTC(), ID: id}, true
}
