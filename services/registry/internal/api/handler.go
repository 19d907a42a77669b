package api

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/jobspec"
	"github.com/cronmesh/cronmesh/libs/reqlimit"
	"github.com/cronmesh/cronmesh/libs/rpcerr"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
	"github.com/cronmesh/cronmesh/services/registry/internal/history"
	"github.com/cronmesh/cronmesh/services/registry/internal/store"
	"github.com/cronmesh/cronmesh/services/registry/internal/validate"
)

// Request limits that are not properties of a job.
const (
	MaxBatch            = 1000
	DefaultPageSize     = 50
	MaxPageSize         = 1000
	DefaultNextRuns     = 5
	MaxNextRuns         = 100
	DefaultPreviewCount = 10
	MaxPreviewCount     = 1000
	// MaxUpdatePaths bounds update_mask: every updatable field and
	// sub-field once.
	MaxUpdatePaths = 64
	// NameScanWindow is how many jobs one ListJobs with name_contains
	// examines: a substring of a name is served by no index, so the work
	// of a call is bounded instead and the client pages on. It covers a
	// whole namespace at the default job quota (10,000) in one call.
	NameScanWindow = 10_000
)

// updatablePaths are the top-level Job fields UpdateJob may change; the rest
// are output only.
var updatablePaths = []string{
	"display_name", "description", "labels", "schedule", "target", "retry_policy",
	"catch_up_window", "paused", "priority", "spread_window", "execution_deadline",
	"stop_retries_at_next_slot", "pause_after_dead_letters", "overlap_policy",
	"max_runs",
}

// Handler implements registryv1connect.JobServiceHandler.
type Handler struct {
	store   *store.Store
	targets *targetcheck.Checker
	history *history.Client
	logger  *slog.Logger
}

var _ registryv1connect.JobServiceHandler = (*Handler)(nil)

// NewHandler returns a JobService handler backed by s, whose jobs' targets
// must pass targets, reading the executions RerunExecution re-runs from
// hist (nil: RerunExecution is UNIMPLEMENTED, everything else works).
func NewHandler(s *store.Store, targets *targetcheck.Checker, hist *history.Client, logger *slog.Logger) *Handler {
	return &Handler{store: s, targets: targets, history: hist, logger: logger}
}

// namespace returns the caller's namespace. A request that reached a handler
// without one is a wiring bug; refusing it keeps tenants apart regardless.
func namespace(ctx context.Context) (string, error) {
	ns, ok := apikey.NamespaceFrom(ctx)
	if !ok {
		return "", connect.NewError(connect.CodeUnauthenticated, errors.New("no authenticated namespace"))
	}
	return ns, nil
}

// CreateJob implements JobService.CreateJob.
func (h *Handler) CreateJob(ctx context.Context, req *connect.Request[registryv1.CreateJobRequest]) (*connect.Response[registryv1.CreateJobResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	v := &rpcerr.Violations{}
	newJob := h.prepareNew(ctx, v, "", req.Msg, ns)
	if !v.Empty() {
		return nil, v.Err()
	}
	jobs, err := h.store.Create(ctx, ns, []store.NewJob{newJob})
	if err != nil {
		return nil, h.toConnect(ctx, "CreateJob", err)
	}
	return connect.NewResponse(&registryv1.CreateJobResponse{Job: withoutSecretHeaders(jobs[0])}), nil
}

// BatchCreateJobs implements JobService.BatchCreateJobs.
func (h *Handler) BatchCreateJobs(ctx context.Context, req *connect.Request[registryv1.BatchCreateJobsRequest]) (*connect.Response[registryv1.BatchCreateJobsResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	v := &rpcerr.Violations{}
	n := len(req.Msg.Requests)
	if n == 0 || n > MaxBatch {
		v.Add("requests", "must hold 1 to %d jobs, got %d", MaxBatch, n)
		return nil, v.Err()
	}
	newJobs := make([]store.NewJob, n)
	seen := make(map[string]int, n)
	for i, r := range req.Msg.Requests {
		prefix := fmt.Sprintf("requests[%d].", i)
		newJobs[i] = h.prepareNew(ctx, v, prefix, r, ns)
		if id := r.GetRequestId(); id != "" {
			if first, dup := seen[id]; dup {
				v.Add(prefix+"request_id", "duplicates requests[%d].request_id", first)
			}
			seen[id] = i
		}
	}
	if !v.Empty() {
		return nil, v.Err()
	}
	jobs, err := h.store.Create(ctx, ns, newJobs)
	if err != nil {
		return nil, h.toConnect(ctx, "BatchCreateJobs", err)
	}
	for i, j := range jobs {
		jobs[i] = withoutSecretHeaders(j)
	}
	return connect.NewResponse(&registryv1.BatchCreateJobsResponse{Jobs: jobs}), nil
}

// withoutSecretHeaders is job as a create call answers it: the signing
// secret it was given or generated is shown (this once), the secret header
// values, which the caller sent, are not.
func withoutSecretHeaders(job *registryv1.Job) *registryv1.Job {
	secret := job.GetTarget().GetHttp().GetSigningSecret()
	targetcheck.Redact(job.GetTarget())
	if h := job.GetTarget().GetHttp(); h != nil {
		h.SigningSecret = secret
	}
	return job
}

// prepareNew validates one create request and gives the job its identity.
// Output-only fields sent by the client are ignored, not rejected, so that a
// job read from the API can be sent back as a template.
func (h *Handler) prepareNew(ctx context.Context, v *rpcerr.Violations, prefix string, req *registryv1.CreateJobRequest, ns string) store.NewJob {
	if req == nil {
		v.Add(strings.TrimSuffix(prefix, "."), "is required")
		return store.NewJob{}
	}
	validate.RequestID(v, prefix+"request_id", req.RequestId)
	created := h.store.Now()
	var job *registryv1.Job
	if req.Job != nil {
		job = proto.Clone(req.Job).(*registryv1.Job)
		job.Id = uuid.Must(uuid.NewV7()).String()
		job.Namespace = ns
		job.CreateTime = timestamppb.New(created)
		job.UpdateTime, job.Etag, job.Version = nil, "", 0
		job.PauseReason, job.PauseTime, job.PausedByKeyId = "", nil, ""
		if job.Paused {
			markPaused(ctx, job, "", created)
		}
	}
	validate.Job(v, h.targets, prefix+"job", job, created)
	return store.NewJob{Job: job, RequestID: req.RequestId}
}

// GetJob implements JobService.GetJob.
func (h *Handler) GetJob(ctx context.Context, req *connect.Request[registryv1.GetJobRequest]) (*connect.Response[registryv1.GetJobResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	v := &rpcerr.Violations{}
	reqlimit.ID(v, "id", req.Msg.Id)
	count := int(req.Msg.NextRunCount)
	if count < 0 || count > MaxNextRuns {
		v.Add("next_run_count", "must be between 0 and %d", MaxNextRuns)
	}
	if !v.Empty() {
		return nil, v.Err()
	}
	job, err := h.store.Get(ctx, ns, req.Msg.Id)
	if err != nil {
		return nil, h.toConnect(ctx, "GetJob", err)
	}
	resp := &registryv1.GetJobResponse{Job: job}
	if !job.Paused {
		sched, errs := jobspec.Schedule(job.Schedule, job.CreateTime.AsTime())
		if errs != nil {
			return nil, h.toConnect(ctx, "GetJob", fmt.Errorf("stored job %s has an invalid schedule: %v", job.Id, errs[0]))
		}
		for _, t := range sched.NextN(h.store.Now(), cmp.Or(count, DefaultNextRuns)) {
			resp.NextRunTimes = append(resp.NextRunTimes, timestamppb.New(t))
		}
	}
	return connect.NewResponse(resp), nil
}

// ListJobs implements JobService.ListJobs.
func (h *Handler) ListJobs(ctx context.Context, req *connect.Request[registryv1.ListJobsRequest]) (*connect.Response[registryv1.ListJobsResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	v := &rpcerr.Violations{}
	size := int(req.Msg.PageSize)
	if size < 0 {
		v.Add("page_size", "must not be negative")
	}
	if reqlimit.PageToken(v, "page_token", req.Msg.PageToken) {
		if _, ok := decodePageToken(req.Msg.PageToken); !ok {
			v.Add("page_token", "is not a token returned by ListJobs")
		}
	}
	reqlimit.Labels(v, "labels", req.Msg.Labels)
	validate.NameQuery(v, "name_contains", req.Msg.NameContains)
	if !v.Empty() {
		return nil, v.Err()
	}
	after, _ := decodePageToken(req.Msg.PageToken)
	jobs, next, err := h.store.List(ctx, ns, store.ListFilter{
		Labels:       req.Msg.Labels,
		Paused:       req.Msg.Paused,
		NameContains: req.Msg.NameContains,
		NameScan:     NameScanWindow,
		PageSize:     min(cmp.Or(size, DefaultPageSize), MaxPageSize),
		After:        after,
	})
	if err != nil {
		return nil, h.toConnect(ctx, "ListJobs", err)
	}
	return connect.NewResponse(&registryv1.ListJobsResponse{Jobs: jobs, NextPageToken: encodePageToken(next)}), nil
}

// UpdateJob implements JobService.UpdateJob.
func (h *Handler) UpdateJob(ctx context.Context, req *connect.Request[registryv1.UpdateJobRequest]) (*connect.Response[registryv1.UpdateJobResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	v := &rpcerr.Violations{}
	patch := req.Msg.GetJob()
	if patch == nil {
		v.Add("job", "is required")
		return nil, v.Err()
	}
	reqlimit.ID(v, "job.id", patch.Id)
	reqlimit.ID(v, "job.etag", patch.Etag)
	paths := req.Msg.GetUpdateMask().GetPaths()
	if !reqlimit.Count(v, "update_mask.paths", len(paths), MaxUpdatePaths) {
		return nil, v.Err()
	}
	if len(paths) == 0 {
		paths = updatablePaths
	}
	if _, err := fieldmaskpb.New(&registryv1.Job{}, paths...); err != nil {
		v.Add("update_mask", "names a field Job does not have: %v", err)
	}
	for _, p := range paths {
		if top, _, _ := strings.Cut(p, "."); !slices.Contains(updatablePaths, top) {
			v.Add("update_mask", "%q is not updatable; updatable: %s", p, strings.Join(updatablePaths, ", "))
		}
	}
	if !v.Empty() {
		return nil, v.Err()
	}
	var generatedSecret string
	replaceSecretHeaders := slices.ContainsFunc(paths, func(p string) bool {
		return p == "target.http.secret_headers" || p == "target.amqp.secret_headers"
	})
	job, err := h.store.Update(ctx, ns, patch.Id, patch.Etag, eventsv1.JobEventKind_JOB_EVENT_KIND_UPDATED, func(job *registryv1.Job) error {
		before := proto.Clone(job).(*registryv1.Job)
		// The stored secrets are taken out before the patch goes in, so
		// that what the patch leaves empty is told apart from what it
		// gives; KeepSecrets then puts back what may be kept.
		targetcheck.Redact(job.Target)
		src := proto.Clone(patch).(*registryv1.Job)
		for _, p := range paths {
			applyPath(job.ProtoReflect(), src.ProtoReflect(), strings.Split(p, "."))
		}
		targetcheck.MoveCredentialHeaders(job.Target)
		targetcheck.KeepSecrets(v, "job.target", job.Target, before.Target, replaceSecretHeaders)
		hadSecret := job.GetTarget().GetHttp().GetSigningSecret() != ""
		validate.Job(v, h.targets, "job", job, job.CreateTime.AsTime())
		if !v.Empty() {
			return v.Err()
		}
		if !hadSecret && job.GetTarget().GetHttp() != nil {
			generatedSecret = job.GetTarget().GetHttp().GetSigningSecret()
		}
		if proto.Equal(before, job) {
			return store.ErrNoChange
		}
		switch {
		case job.Paused && !before.Paused:
			markPaused(ctx, job, "", h.store.Now())
		case !job.Paused:
			markResumed(job)
		}
		return nil
	})
	if err != nil {
		return nil, h.toConnect(ctx, "UpdateJob", err)
	}
	if generatedSecret != "" {
		job.GetTarget().GetHttp().SigningSecret = generatedSecret
	}
	return connect.NewResponse(&registryv1.UpdateJobResponse{Job: job}), nil
}

// applyPath copies the field at path from src to dst; a field src does not
// set is cleared in dst. Setting one member of a oneof clears the others.
func applyPath(dst, src protoreflect.Message, path []string) {
	fd := dst.Descriptor().Fields().ByName(protoreflect.Name(path[0]))
	if len(path) == 1 {
		if src.Has(fd) {
			dst.Set(fd, src.Get(fd))
		} else {
			dst.Clear(fd)
		}
		return
	}
	if !src.Has(fd) && !dst.Has(fd) {
		return
	}
	applyPath(dst.Mutable(fd).Message(), src.Get(fd).Message(), path[1:])
}

// DeleteJob implements JobService.DeleteJob.
func (h *Handler) DeleteJob(ctx context.Context, req *connect.Request[registryv1.DeleteJobRequest]) (*connect.Response[registryv1.DeleteJobResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	v := &rpcerr.Violations{}
	reqlimit.ID(v, "id", req.Msg.Id)
	reqlimit.ID(v, "etag", req.Msg.Etag)
	if !v.Empty() {
		return nil, v.Err()
	}
	if err := h.store.Delete(ctx, ns, req.Msg.Id, req.Msg.Etag); err != nil {
		return nil, h.toConnect(ctx, "DeleteJob", err)
	}
	return connect.NewResponse(&registryv1.DeleteJobResponse{}), nil
}

// PauseJob implements JobService.PauseJob.
func (h *Handler) PauseJob(ctx context.Context, req *connect.Request[registryv1.PauseJobRequest]) (*connect.Response[registryv1.PauseJobResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	v := &rpcerr.Violations{}
	reqlimit.ID(v, "id", req.Msg.Id)
	validate.PauseReason(v, "reason", req.Msg.Reason)
	if !v.Empty() {
		return nil, v.Err()
	}
	job, err := h.store.Update(ctx, ns, req.Msg.Id, "", eventsv1.JobEventKind_JOB_EVENT_KIND_PAUSED, func(job *registryv1.Job) error {
		if job.Paused {
			// A repeated pause is a no-op, so that a retried call or a
			// second pause on failure neither moves the pause time nor
			// takes the pause over; only a new reason is recorded.
			if req.Msg.Reason == "" || req.Msg.Reason == job.PauseReason {
				return store.ErrNoChange
			}
			job.PauseReason = req.Msg.Reason
			return nil
		}
		markPaused(ctx, job, req.Msg.Reason, h.store.Now())
		return nil
	})
	if err != nil {
		return nil, h.toConnect(ctx, "PauseJob", err)
	}
	return connect.NewResponse(&registryv1.PauseJobResponse{Job: job}), nil
}

// ResumeJob implements JobService.ResumeJob.
func (h *Handler) ResumeJob(ctx context.Context, req *connect.Request[registryv1.ResumeJobRequest]) (*connect.Response[registryv1.ResumeJobResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	v := &rpcerr.Violations{}
	if !reqlimit.ID(v, "id", req.Msg.Id) {
		return nil, v.Err()
	}
	job, err := h.store.Update(ctx, ns, req.Msg.Id, "", eventsv1.JobEventKind_JOB_EVENT_KIND_RESUMED, func(job *registryv1.Job) error {
		if !job.Paused {
			return store.ErrNoChange
		}
		markResumed(job)
		return nil
	})
	if err != nil {
		return nil, h.toConnect(ctx, "ResumeJob", err)
	}
	return connect.NewResponse(&registryv1.ResumeJobResponse{Job: job}), nil
}

// markPaused pauses job at now, recording why and the id of the caller's
// key (empty when the context carries no principal).
func markPaused(ctx context.Context, job *registryv1.Job, reason string, now time.Time) {
	job.Paused = true
	job.PauseReason = reason
	job.PauseTime = timestamppb.New(now)
	job.PausedByKeyId = ""
	if p, ok := apikey.PrincipalFrom(ctx); ok {
		job.PausedByKeyId = p.KeyID
	}
}

// markResumed lets job run and forgets its pause.
func markResumed(job *registryv1.Job) {
	job.Paused = false
	job.PauseReason, job.PauseTime, job.PausedByKeyId = "", nil, ""
}

// RunJob implements JobService.RunJob.
func (h *Handler) RunJob(ctx context.Context, req *connect.Request[registryv1.RunJobRequest]) (*connect.Response[registryv1.RunJobResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	v := &rpcerr.Violations{}
	reqlimit.ID(v, "id", req.Msg.Id)
	validate.RequestID(v, "request_id", req.Msg.RequestId)
	reqlimit.Count(v, "headers_override", len(req.Msg.HeadersOverride), targetcheck.MaxHeaders)
	validate.OverlapPolicy(v, "overlap_policy", req.Msg.OverlapPolicy)
	if !v.Empty() {
		return nil, v.Err()
	}
	override := h.runOverride(req.Msg)
	if policy := req.Msg.OverlapPolicy; policy != registryv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED {
		// The run's event carries the job as this run sees it: the
		// trigger fires the run with that job's policy.
		targetOverride := override
		override = func(job *registryv1.Job) ([]string, error) {
			job.OverlapPolicy = policy
			if targetOverride == nil {
				return nil, nil
			}
			return targetOverride(job)
		}
	}
	nominal, err := h.store.Run(ctx, ns, req.Msg.Id, req.Msg.RequestId, override, "")
	if err != nil {
		return nil, h.toConnect(ctx, "RunJob", err)
	}
	return connect.NewResponse(&registryv1.RunJobResponse{NominalTime: timestamppb.New(nominal)}), nil
}

// runOverride is the store's override of a run request's job; nil when the
// request overrides nothing.
func (h *Handler) runOverride(req *registryv1.RunJobRequest) store.RunOverride {
	if req.TargetOverride == nil && req.BodyOverride == nil && len(req.HeadersOverride) == 0 {
		return nil
	}
	return func(job *registryv1.Job) ([]string, error) { return h.overrideRun(req, job) }
}

// RerunExecution implements JobService.RerunExecution: a manual run of the
// execution's job, as RunJob makes, that records the execution it re-runs.
// The execution is read from the history with the caller's own key, so
// that the history's namespace check decides what the caller may re-run.
func (h *Handler) RerunExecution(ctx context.Context, req *connect.Request[registryv1.RerunExecutionRequest]) (*connect.Response[registryv1.RerunExecutionResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	v := &rpcerr.Violations{}
	if m.ExecutionId == "" {
		v.Add("execution_id", "is required")
	} else if reqlimit.ID(v, "execution_id", m.ExecutionId) && uuid.Validate(m.ExecutionId) != nil {
		v.Add("execution_id", "is not an execution id (a UUID)")
	}
	validate.RequestID(v, "request_id", m.RequestId)
	reqlimit.Count(v, "headers_override", len(m.HeadersOverride), targetcheck.MaxHeaders)
	if !v.Empty() {
		return nil, v.Err()
	}
	respond := func(jobID string, nominal time.Time) *connect.Response[registryv1.RerunExecutionResponse] {
		return connect.NewResponse(&registryv1.RerunExecutionResponse{
			JobId: jobID, NominalTime: timestamppb.New(nominal), ExecutionId: execid.For(jobID, nominal),
		})
	}
	if m.RequestId != "" {
		// A replay is answered from the registry alone: it must not
		// depend on the history, nor on the execution's state since.
		jobID, nominal, found, err := h.store.PreviousRun(ctx, ns, m.RequestId)
		if err != nil {
			return nil, h.toConnect(ctx, "RerunExecution", err)
		}
		if found {
			return respond(jobID, nominal), nil
		}
	}
	exec, err := h.history.Execution(ctx, req.Header().Get("Authorization"), m.ExecutionId)
	if err != nil {
		return nil, h.toConnect(ctx, "RerunExecution", err)
	}
	if !history.Finished(exec.GetStatus()) {
		return nil, h.toConnect(ctx, "RerunExecution", history.ErrNotFinished)
	}
	run := &registryv1.RunJobRequest{
		Id: exec.GetJobId(), RequestId: m.RequestId,
		TargetOverride: m.TargetOverride, BodyOverride: m.BodyOverride, HeadersOverride: m.HeadersOverride,
	}
	nominal, err := h.store.Run(ctx, ns, run.Id, run.RequestId, h.runOverride(run), exec.GetExecutionId())
	if err != nil {
		return nil, h.toConnect(ctx, "RerunExecution", err)
	}
	return respond(run.Id, nominal), nil
}

// overrideRun replaces job.Target (the stored one, secrets included) with
// the run's target: the request's overrides applied and checked exactly as
// CreateJob checks a target. It returns what was overridden, or the
// violations, each naming the request field it comes from.
func (h *Handler) overrideRun(req *registryv1.RunJobRequest, job *registryv1.Job) ([]string, error) {
	stored := job.Target
	v := &rpcerr.Violations{}
	var overrides []string
	target := proto.Clone(stored).(*registryv1.Target)
	if o := req.TargetOverride; o != nil {
		overrides = append(overrides, "target")
		target = proto.Clone(o).(*registryv1.Target)
		// The signing secret is the job's: a run cannot sign with another.
		if ht := target.GetHttp(); ht != nil {
			ht.SigningSecret = ""
		}
		targetcheck.MoveCredentialHeaders(target)
		targetcheck.KeepSecrets(v, "target_override", target, stored, false)
		h.targets.Target(v, "target_override", job.Namespace, target)
		if !v.Empty() {
			return nil, v.Err()
		}
		if ht := target.GetHttp(); ht != nil && ht.SigningSecret == "" {
			// An AMQP job run at an HTTP target signs with a secret of
			// its own, never shown.
			ht.SigningSecret = validate.NewSigningSecret()
		}
	}
	if b := req.BodyOverride; b != nil {
		overrides = append(overrides, "body")
		switch k := target.GetKind().(type) {
		case *registryv1.Target_Http:
			k.Http.Body = *b
		case *registryv1.Target_Amqp:
			k.Amqp.Body = *b
		}
	}
	if len(req.HeadersOverride) > 0 {
		overrides = append(overrides, "headers")
		plain, secret := runHeaders(target)
		for name, value := range req.HeadersOverride {
			// A header given again replaces the one of either map.
			for n := range plain {
				if strings.EqualFold(n, name) {
					delete(plain, n)
				}
			}
			for n := range secret {
				if strings.EqualFold(n, name) {
					delete(secret, n)
				}
			}
			plain[name] = value
		}
	}
	// The resulting target is checked as a whole; a problem of the body or
	// of a header is reported at the request field that brought it.
	checked := &rpcerr.Violations{}
	h.targets.Target(checked, "target", job.Namespace, target)
	for _, fv := range checked.List() {
		v.Add(overrideField(fv.Field, req), "%s", fv.Description)
	}
	if !v.Empty() {
		return nil, v.Err()
	}
	job.Target = target
	return overrides, nil
}

// runHeaders returns the plain and secret header maps of t, created when
// missing.
func runHeaders(t *registryv1.Target) (plain, secret map[string]string) {
	switch k := t.GetKind().(type) {
	case *registryv1.Target_Http:
		if k.Http.Headers == nil {
			k.Http.Headers = map[string]string{}
		}
		return k.Http.Headers, k.Http.SecretHeaders
	case *registryv1.Target_Amqp:
		if k.Amqp.Headers == nil {
			k.Amqp.Headers = map[string]string{}
		}
		return k.Amqp.Headers, k.Amqp.SecretHeaders
	}
	return map[string]string{}, nil
}

// overrideField names the request field a violation of the run's target
// ("target.http.body", "target.http.headers[\"X\"]") comes from.
func overrideField(field string, req *registryv1.RunJobRequest) string {
	_, rest, _ := strings.Cut(field, ".") // "http.body"
	_, sub, _ := strings.Cut(rest, ".")   // "body"
	switch {
	case req.BodyOverride != nil && sub == "body":
		return "body_override"
	case len(req.HeadersOverride) > 0 && (strings.HasPrefix(sub, "headers") || strings.HasPrefix(sub, "secret_headers")):
		if _, name, ok := strings.Cut(sub, "["); ok {
			return "headers_override[" + name
		}
		return "headers_override"
	case req.TargetOverride != nil:
		return "target_override." + rest
	default:
		return field
	}
}

// PreviewSchedule implements JobService.PreviewSchedule. It needs no
// namespace data but, like every call, an API key.
func (h *Handler) PreviewSchedule(ctx context.Context, req *connect.Request[registryv1.PreviewScheduleRequest]) (*connect.Response[registryv1.PreviewScheduleResponse], error) {
	if _, err := namespace(ctx); err != nil {
		return nil, err
	}
	v := &rpcerr.Violations{}
	count := int(req.Msg.Count)
	if count < 0 || count > MaxPreviewCount {
		v.Add("count", "must be between 1 and %d", MaxPreviewCount)
	}
	from := h.store.Now()
	if f := req.Msg.From; f != nil {
		if f.CheckValid() != nil {
			v.Add("from", "is not a valid timestamp")
		} else {
			from = f.AsTime()
		}
	}
	if !validate.ScheduleSize(v, "schedule", req.Msg.Schedule) {
		return nil, v.Err()
	}
	sched, errs := jobspec.Schedule(req.Msg.Schedule, from)
	for _, e := range errs {
		v.Add(strings.TrimSuffix("schedule."+e.Field, "."), "%s", e.Description)
	}
	if !v.Empty() {
		return nil, v.Err()
	}
	resp := &registryv1.PreviewScheduleResponse{}
	for _, t := range sched.NextN(from, cmp.Or(count, DefaultPreviewCount)) {
		resp.Times = append(resp.Times, timestamppb.New(t))
	}
	return connect.NewResponse(resp), nil
}

// Page tokens are opaque to clients (base64 of the last id) so the paging
// scheme can change without breaking them.
func encodePageToken(lastID string) string {
	if lastID == "" {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(lastID))
}

func decodePageToken(token string) (string, bool) {
	if token == "" {
		return "", true
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return "", false
	}
	if _, err := uuid.Parse(string(raw)); err != nil {
		return "", false
	}
	return string(raw), true
}
