package cli

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/services/cronctl/internal/apply"
)

func jobsCommand() *command {
	return &command{name: "jobs", summary: "create, inspect and change jobs (registry JobService)", subs: []*command{
		{name: "create", args: "[-f FILE] [--name N --cron EXPR --url URL ...]", summary: "create a job from a file and/or flags", setup: jobsCreateSetup},
		{name: "list", summary: "list the namespace's jobs", setup: jobsListSetup},
		{name: "get", args: "ID", summary: "show a job and its next run times", setup: jobsGetSetup},
		{name: "update", args: "ID [-f FILE] [flags]", summary: "change the given fields of a job (--etag guards against concurrent changes)", setup: jobsUpdateSetup},
		{name: "pause", args: "ID [--reason TEXT]", summary: "stop a job from firing, saying why", setup: jobsPauseSetup},
		{name: "resume", args: "ID", summary: "let a paused job fire again (clears the pause reason)", setup: jobsResumeSetup},
		{name: "run", args: "ID [--target-url URL] [--body B] [--header K=V]", summary: "fire a job once now, optionally with another URL, body or headers for this run", setup: jobsRunSetup},
		{name: "delete", args: "ID", summary: "delete a job", setup: jobsDeleteSetup},
		{name: "preview", args: "[--cron EXPR | --every D | -f FILE]", summary: "the next times a schedule fires, computed by the registry", setup: jobsPreviewSetup},
	}}
}

// readJob reads the one job of a -f file.
func readJob(s *session, path string) (apply.Spec, error) {
	data, err := s.env.ReadFile(path)
	if err != nil {
		return apply.Spec{}, err
	}
	specs, err := apply.Parse(path, data)
	if err != nil {
		return apply.Spec{}, err
	}
	if len(specs) != 1 {
		return apply.Spec{}, fmt.Errorf("%s: holds %d jobs; use `cronctl apply -f` for several", path, len(specs))
	}
	return specs[0], nil
}

func jobsCreateSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	var f jobFlags
	f.register(fs)
	requestID := fs.String("request-id", "", "idempotency key: repeating the call returns the job the first one created")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args); err != nil {
			return err
		}
		job := &registryv1.Job{}
		if f.file != "" {
			spec, err := readJob(s, f.file)
			if err != nil {
				return err
			}
			job = spec.Job
		}
		if _, err := f.apply(job); err != nil {
			return err
		}
		resp, err := s.jobs.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: job, RequestId: *requestID}))
		if err != nil {
			return err
		}
		return printJob(s, resp.Msg.GetJob(), nil)
	}
}

func jobsListSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	var labels keyValues
	fs.Var(&labels, "label", "only jobs with this label key=value (repeatable)")
	paused := fs.String("paused", "", "true: only paused jobs; false: only active ones")
	name := fs.String("name", "", "only jobs whose name contains this text, ignoring case (each call searches 10,000 jobs: use --all for the whole namespace)")
	pageSize := fs.Int("page-size", 0, "jobs per page (default 50, at most 1000)")
	pageToken := fs.String("page-token", "", "the next page, from a previous list")
	all := fs.Bool("all", false, "follow every page")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args); err != nil {
			return err
		}
		req := &registryv1.ListJobsRequest{PageSize: int32(*pageSize), PageToken: *pageToken, Labels: labels, NameContains: *name}
		if *paused != "" {
			p, err := strconv.ParseBool(*paused)
			if err != nil {
				return usagef("--paused: want true or false")
			}
			req.Paused = &p
		}
		items, next, err := collectPages(*all, req.PageToken, func(token string) ([]proto.Message, string, error) {
			req.PageToken = token
			resp, err := s.jobs.ListJobs(ctx, connect.NewRequest(req))
			if err != nil {
				return nil, "", err
			}
			return messages(resp.Msg.GetJobs()), resp.Msg.GetNextPageToken(), nil
		})
		if err != nil {
			return err
		}
		return s.out.List(items, next, []string{"ID", "NAME", "SCHEDULE", "TARGET", "PAUSED", "VERSION"}, func(m proto.Message) []string {
			j := m.(*registryv1.Job)
			return []string{j.GetId(), j.GetDisplayName(), scheduleText(j.GetSchedule()), targetText(j.GetTarget()), strconv.FormatBool(j.GetPaused()), strconv.FormatInt(j.GetVersion(), 10)}
		})
	}
}

func jobsGetSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	next := fs.Int("next", 0, "how many next run times to show (default 5, at most 100)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		resp, err := s.jobs.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: args[0], NextRunCount: int32(*next)}))
		if err != nil {
			return err
		}
		if s.out.Format() != "table" {
			return s.out.Object(resp.Msg, nil)
		}
		return printJob(s, resp.Msg.GetJob(), resp.Msg.GetNextRunTimes())
	}
}

func jobsUpdateSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	var f jobFlags
	f.register(fs)
	etag := fs.String("etag", "", "fail with ABORTED unless the job still has this etag (from get)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		job := &registryv1.Job{}
		var paths []string
		if f.file != "" {
			spec, err := readJob(s, f.file)
			if err != nil {
				return err
			}
			job = spec.Job
			for _, fd := range spec.Fields {
				paths = append(paths, string(fd.Name()))
			}
		}
		flagPaths, err := f.apply(job)
		if err != nil {
			return err
		}
		paths = append(paths, flagPaths...)
		if len(paths) == 0 {
			return usagef("nothing to update: give -f FILE or field flags (--name, --cron, --url, ...)")
		}
		job.Id, job.Etag = args[0], *etag
		resp, err := s.jobs.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{Job: job, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}}))
		if err != nil {
			return err
		}
		return printJob(s, resp.Msg.GetJob(), nil)
	}
}

func jobsPauseSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	reason := fs.String("reason", "", "why the job is paused (at most 512 characters), shown by jobs get and list until resume")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		resp, err := s.jobs.PauseJob(ctx, connect.NewRequest(&registryv1.PauseJobRequest{Id: args[0], Reason: *reason}))
		if err != nil {
			return err
		}
		return printJob(s, resp.Msg.GetJob(), nil)
	}
}

func jobsResumeSetup(*flag.FlagSet) func(context.Context, *session, []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		resp, err := s.jobs.ResumeJob(ctx, connect.NewRequest(&registryv1.ResumeJobRequest{Id: args[0]}))
		if err != nil {
			return err
		}
		return printJob(s, resp.Msg.GetJob(), nil)
	}
}

func jobsRunSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	requestID := fs.String("request-id", "", "idempotency key: repeating the call fires once")
	var o overrideFlags
	o.register(fs)
	overlap := fs.String("overlap-policy", "", "this run only: "+overlapPolicyUsage+" (default: the job's)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		req := &registryv1.RunJobRequest{Id: args[0], RequestId: *requestID}
		var err error
		if req.TargetOverride, req.BodyOverride, req.HeadersOverride, err = o.overrides(ctx, s, fs, args[0]); err != nil {
			return err
		}
		if *overlap != "" {
			if req.OverlapPolicy, err = parseOverlapPolicy(*overlap); err != nil {
				return err
			}
		}
		resp, err := s.jobs.RunJob(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		return s.out.Object(resp.Msg, func() [][2]string {
			return [][2]string{{"job", args[0]}, {"nominal time", timeText(resp.Msg.GetNominalTime())}}
		})
	}
}

// rerunSetup is `cronctl rerun`: JobService.RerunExecution, with the
// override flags of `jobs run`.
func rerunSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	requestID := fs.String("request-id", "", "idempotency key: repeating the call fires once")
	var o overrideFlags
	o.register(fs)
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "EXECUTION_ID"); err != nil {
			return err
		}
		req := &registryv1.RerunExecutionRequest{ExecutionId: args[0], RequestId: *requestID}
		jobID := ""
		if o.targetURL != "" {
			// --target-url edits the job's target: the history names the
			// job.
			got, err := s.history.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: args[0]}))
			if err != nil {
				return err
			}
			jobID = got.Msg.GetExecution().GetJobId()
		}
		var err error
		if req.TargetOverride, req.BodyOverride, req.HeadersOverride, err = o.overrides(ctx, s, fs, jobID); err != nil {
			return err
		}
		resp, err := s.jobs.RerunExecution(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		return s.out.Object(resp.Msg, func() [][2]string {
			return [][2]string{
				{"re-run of", args[0]},
				{"job", resp.Msg.GetJobId()},
				{"execution", resp.Msg.GetExecutionId()},
				{"nominal time", timeText(resp.Msg.GetNominalTime())},
			}
		})
	}
}

// overrideFlags are the flags of a run that overrides the job's target for
// that run only (`jobs run`, `rerun`).
type overrideFlags struct {
	targetURL string
	body      string
	headers   keyValues
}

func (o *overrideFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.targetURL, "target-url", "", "this run only: send to this URL instead (the job's HTTP target otherwise unchanged; secret headers must be given again with --header for another host)")
	fs.StringVar(&o.body, "body", "", "this run only: send this body instead of the job's")
	o.headers = keyValues{}
	fs.Var(&o.headers, "header", "this run only: add or replace a header, K=V (repeatable; credential headers stay secret)")
}

// overrides are the request's overrides: the target of job jobID with
// --target-url (none without --target-url), the body when --body was given
// (even empty), and the headers.
func (o *overrideFlags) overrides(ctx context.Context, s *session, fs *flag.FlagSet, jobID string) (*registryv1.Target, *string, map[string]string, error) {
	var target *registryv1.Target
	if o.targetURL != "" {
		// The override is the job's target with another URL: read
		// (secret header values come back empty and the registry keeps
		// the stored ones for the same origin).
		got, err := s.jobs.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: jobID, NextRunCount: 1}))
		if err != nil {
			return nil, nil, nil, err
		}
		target = got.Msg.GetJob().GetTarget()
		if target.GetHttp() == nil {
			return nil, nil, nil, usagef("--target-url: the job's target is not HTTP")
		}
		target.GetHttp().Url = o.targetURL
	}
	var body *string
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "body" {
			body = &o.body
		}
	})
	return target, body, o.headers, nil
}

func jobsDeleteSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	etag := fs.String("etag", "", "fail with ABORTED unless the job still has this etag")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		resp, err := s.jobs.DeleteJob(ctx, connect.NewRequest(&registryv1.DeleteJobRequest{Id: args[0], Etag: *etag}))
		if err != nil {
			return err
		}
		return s.out.Object(resp.Msg, func() [][2]string { return [][2]string{{"deleted", args[0]}} })
	}
}

func jobsPreviewSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	var sf scheduleFlags
	sf.register(fs)
	file := fs.String("f", "", "take the schedule of the job in this file")
	count := fs.Int("count", 0, "how many times (default 10, at most 1000)")
	from := fs.String("from", "", "RFC 3339 instant to start after (default now)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args); err != nil {
			return err
		}
		var sched *registryv1.Schedule
		if *file != "" {
			spec, err := readJob(s, *file)
			if err != nil {
				return err
			}
			sched = spec.Job.GetSchedule()
		}
		flagSched, _, err := sf.schedule()
		if err != nil {
			return err
		}
		if flagSched != nil {
			sched = flagSched
		}
		if sched == nil {
			return usagef("give a schedule: --cron, --every, --at, --after or -f FILE")
		}
		req := &registryv1.PreviewScheduleRequest{Schedule: sched, Count: int32(*count)}
		if *from != "" {
			t, err := time.Parse(time.RFC3339, *from)
			if err != nil {
				return usagef("--from: want an RFC 3339 time: %v", err)
			}
			req.From = timestamppb.New(t)
		}
		resp, err := s.jobs.PreviewSchedule(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		if s.out.Format() != "table" {
			return s.out.Object(resp.Msg, nil)
		}
		items := make([]proto.Message, 0, len(resp.Msg.GetTimes()))
		for _, t := range resp.Msg.GetTimes() {
			items = append(items, t)
		}
		return s.out.List(items, "", []string{"TIME (UTC)"}, func(m proto.Message) []string {
			return []string{timeText(m.(*timestamppb.Timestamp))}
		})
	}
}

// printJob prints a job: all its fields for scripts, the ones people read
// for tables. A signing secret (only in a CreateJob response) is shown,
// since it is the one chance to read it.
func printJob(s *session, j *registryv1.Job, next []*timestamppb.Timestamp) error {
	return s.out.Object(j, func() [][2]string {
		rows := [][2]string{
			{"id", j.GetId()},
			{"name", j.GetDisplayName()},
			{"namespace", j.GetNamespace()},
			{"schedule", scheduleText(j.GetSchedule())},
			{"target", targetText(j.GetTarget())},
			{"paused", strconv.FormatBool(j.GetPaused())},
			{"priority", strings.TrimPrefix(j.GetPriority().String(), "PRIORITY_")},
			{"overlap policy", overlapPolicyText(j.GetOverlapPolicy())},
			{"version", strconv.FormatInt(j.GetVersion(), 10)},
			{"etag", j.GetEtag()},
			{"updated", timeText(j.GetUpdateTime())},
		}
		if j.GetPaused() {
			rows = append(rows,
				[2]string{"paused at", timeText(j.GetPauseTime())},
				[2]string{"paused by key", j.GetPausedByKeyId()},
				[2]string{"pause reason", j.GetPauseReason()})
		}
		if n := j.GetMaxRuns(); n > 0 {
			rows = append(rows, [2]string{"max runs", fmt.Sprintf("%d scheduled runs, then the job completes (cronctl slots shows the count)", n)})
		}
		if n := j.GetPauseAfterDeadLetters(); n > 0 {
			rows = append(rows, [2]string{"pause after", fmt.Sprintf("%d dead-lettered executions in a row", n)})
		}
		if d := j.GetDescription(); d != "" {
			rows = append(rows, [2]string{"description", d})
		}
		if len(j.GetLabels()) > 0 {
			rows = append(rows, [2]string{"labels", (*keyValues)(&j.Labels).String()})
		}
		if secret := j.GetTarget().GetHttp().GetSigningSecret(); secret != "" {
			rows = append(rows, [2]string{"signing secret", secret + "  (shown once: store it now)"})
		}
		for i, t := range next {
			label := ""
			if i == 0 {
				label = "next runs"
			}
			rows = append(rows, [2]string{label, timeText(t)})
		}
		return rows
	})
}

func scheduleText(s *registryv1.Schedule) string {
	var text string
	switch k := s.GetKind().(type) {
	case *registryv1.Schedule_Cron:
		text = "cron " + k.Cron
		if tz := s.GetTimeZone(); tz != "" && tz != "UTC" {
			text += " (" + tz + ")"
		}
	case *registryv1.Schedule_Interval:
		text = "every " + k.Interval.GetEvery().AsDuration().String()
	case *registryv1.Schedule_At:
		text = "at " + timeText(k.At)
	case *registryv1.Schedule_After:
		text = "after " + k.After.AsDuration().String()
	default:
		text = "-"
	}
	return text
}

func targetText(t *registryv1.Target) string {
	switch k := t.GetKind().(type) {
	case *registryv1.Target_Http:
		return k.Http.GetMethod() + " " + k.Http.GetUrl()
	case *registryv1.Target_Amqp:
		return "amqp " + k.Amqp.GetExchange() + "/" + k.Amqp.GetRoutingKey()
	default:
		return "-"
	}
}

func timeText(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().UTC().Format(time.RFC3339)
}
