package cli

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
)

func historyCommand() *command {
	return &command{name: "history", summary: "what happened to the jobs: executions, attempts, stats (history HistoryService)", subs: []*command{
		{name: "list", args: "[--job ID] [--status S]... [--since T] [--until T] [--query Q]", summary: "list executions and missed slots, newest first", setup: historyListSetup},
		{name: "get", args: "ID", summary: "one execution with every attempt, its trace id and trace link", setup: historyGetSetup},
		{name: "stats", args: "JOB_ID [--since T] [--until T]", summary: "a job's runs, failures, missed slots and durations over a window", setup: historyStatsSetup},
	}}
}

// statusNames are the execution statuses as cronctl spells them, in the
// API's order.
var statusNames = map[string]historyv1.ExecutionStatus{
	"running":   historyv1.ExecutionStatus_EXECUTION_STATUS_RUNNING,
	"succeeded": historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED,
	"retrying":  historyv1.ExecutionStatus_EXECUTION_STATUS_RETRYING,
	"failed":    historyv1.ExecutionStatus_EXECUTION_STATUS_FAILED,
	"dead":      historyv1.ExecutionStatus_EXECUTION_STATUS_DEAD,
	"cancelled": historyv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED,
	"missed":    historyv1.ExecutionStatus_EXECUTION_STATUS_MISSED,
	"skipped":   historyv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED,
	"buffered":  historyv1.ExecutionStatus_EXECUTION_STATUS_BUFFERED,
}

// triggerNames are the trigger kinds as cronctl spells them.
var triggerNames = map[string]dispatchv1.TriggerKind{
	"scheduled": dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED,
	"manual":    dispatchv1.TriggerKind_TRIGGER_KIND_MANUAL,
	"backfill":  dispatchv1.TriggerKind_TRIGGER_KIND_BACKFILL,
	"catch-up":  dispatchv1.TriggerKind_TRIGGER_KIND_CATCH_UP,
}

// parseStatuses reads --status values: each a status name or a
// comma-separated list of them, case-insensitive.
func parseStatuses(values []string) ([]historyv1.ExecutionStatus, error) {
	return parseNames(values, statusNames, "--status %q: want running, succeeded, retrying, failed, dead, cancelled, missed, skipped or buffered")
}

// parseTriggers reads --trigger values like parseStatuses.
func parseTriggers(values []string) ([]dispatchv1.TriggerKind, error) {
	return parseNames(values, triggerNames, "--trigger %q: want scheduled, manual, backfill or catch-up")
}

// parseNames reads flag values, each a name of names or a comma-separated
// list of them, case-insensitive; an unknown name is a usage error, unknown
// saying which (its %q).
func parseNames[T any](values []string, names map[string]T, unknown string) ([]T, error) {
	var out []T
	for _, v := range values {
		for name := range strings.SplitSeq(v, ",") {
			name = strings.ToLower(strings.TrimSpace(name))
			x, ok := names[name]
			if !ok {
				return nil, usagef(unknown, name)
			}
			out = append(out, x)
		}
	}
	return out, nil
}

// parseTimeArg reads a --since/--until value: an RFC 3339 time, or a Go
// duration meaning that long before now ("90m", "24h"). Empty is unset.
func parseTimeArg(flagName, v string, now time.Time) (*timestamppb.Timestamp, error) {
	if v == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return timestamppb.New(t), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return timestamppb.New(now.Add(-d)), nil
	}
	return nil, usagef("--%s %q: want an RFC 3339 time (2030-01-02T15:04:05Z) or a duration ago (90m, 24h)", flagName, v)
}

// statusText is a status without its enum prefix, lower case.
func statusText(s historyv1.ExecutionStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "EXECUTION_STATUS_"))
}

func triggerText(k dispatchv1.TriggerKind) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k.String(), "TRIGGER_KIND_")), "_", "-")
}

func durationText(d *durationpb.Duration) string {
	if d == nil {
		return "-"
	}
	return d.AsDuration().String()
}

// oneLine shortens s to at most n runes on one line, for table cells: a
// response body or an error may hold newlines and kilobytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func historyListSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	job := fs.String("job", "", "only this job's executions")
	var statuses, triggers stringList
	fs.Var(&statuses, "status", "only executions in this status: running, succeeded, retrying, failed, dead, cancelled, missed, skipped, buffered (repeatable or comma-separated)")
	fs.Var(&triggers, "trigger", "only executions fired this way: scheduled, manual, backfill, catch-up (repeatable or comma-separated)")
	since := fs.String("since", "", "only nominal times at or after this: RFC 3339, or a duration ago (24h)")
	until := fs.String("until", "", "only nominal times before this: RFC 3339, or a duration ago")
	query := fs.String("query", "", "case-insensitive text in the error or response (3 to 200 characters)")
	pageSize := fs.Int("page-size", 0, "per page (default 50, at most 1000)")
	pageToken := fs.String("page-token", "", "the next page, from a previous list (with the same filters)")
	all := fs.Bool("all", false, "follow every page")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args); err != nil {
			return err
		}
		req := &historyv1.ListExecutionsRequest{JobId: *job, Query: *query, PageSize: int32(*pageSize), PageToken: *pageToken}
		var err error
		if req.Statuses, err = parseStatuses(statuses); err != nil {
			return err
		}
		if req.TriggerKinds, err = parseTriggers(triggers); err != nil {
			return err
		}
		now := s.now()
		if req.StartTime, err = parseTimeArg("since", *since, now); err != nil {
			return err
		}
		if req.EndTime, err = parseTimeArg("until", *until, now); err != nil {
			return err
		}
		items, next, err := collectPages(*all, req.PageToken, func(token string) ([]proto.Message, string, error) {
			req.PageToken = token
			resp, err := s.history.ListExecutions(ctx, connect.NewRequest(req))
			if err != nil {
				return nil, "", err
			}
			return messages(resp.Msg.GetExecutions()), resp.Msg.GetNextPageToken(), nil
		})
		if err != nil {
			return err
		}
		return s.out.List(items, next, []string{"ID", "JOB", "NAME", "NOMINAL TIME", "STATUS", "ATTEMPT", "DURATION", "HTTP", "REASON"}, func(m proto.Message) []string {
			e := m.(*historyv1.Execution)
			return []string{
				e.GetExecutionId(), e.GetJobId(), orDash(e.GetJobDisplayName()), timeText(e.GetNominalTime()), statusText(e.GetStatus()),
				strconv.Itoa(int(e.GetAttempt())), durationText(e.GetDuration()), httpText(e.GetResponseStatus()), orDash(oneLine(e.GetReason(), 60)),
			}
		})
	}
}

func httpText(status int32) string {
	if status == 0 {
		return "-"
	}
	return strconv.Itoa(int(status))
}

func historyGetSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		resp, err := s.history.GetExecution(ctx, connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: args[0]}))
		if err != nil {
			return err
		}
		if s.out.Format() != "table" {
			return s.out.Object(resp.Msg, nil)
		}
		if err := s.out.Object(resp.Msg, func() [][2]string { return executionRows(resp.Msg.GetExecution()) }); err != nil {
			return err
		}
		attempts := make([]proto.Message, 0, len(resp.Msg.GetAttempts()))
		for _, a := range resp.Msg.GetAttempts() {
			attempts = append(attempts, a)
		}
		if len(attempts) == 0 {
			return nil
		}
		fmt.Fprintln(s.env.Stdout)
		return s.out.List(attempts, "", []string{"ATTEMPT", "STATUS", "STARTED", "DURATION", "HTTP", "RETRY IN", "REASON"}, func(m proto.Message) []string {
			a := m.(*historyv1.Attempt)
			return []string{
				strconv.Itoa(int(a.GetAttempt())), statusText(a.GetStatus()), timeText(a.GetStartTime()), durationText(a.GetDuration()),
				httpText(a.GetResponseStatus()), durationText(a.GetRetryDelay()), orDash(oneLine(a.GetReason(), 80)),
			}
		})
	}
}

// executionRows are an execution's key/value rows for a person.
func executionRows(e *historyv1.Execution) [][2]string {
	rows := [][2]string{
		{"id", e.GetExecutionId()},
		{"job", e.GetJobId()},
		{"name", orDash(e.GetJobDisplayName())},
		{"status", statusText(e.GetStatus())},
		{"trigger", triggerText(e.GetTriggerKind())},
		{"nominal time", timeText(e.GetNominalTime())},
		{"fired", timeText(e.GetFireTime())},
		{"attempt", strconv.Itoa(int(e.GetAttempt()))},
		{"started", timeText(e.GetStartTime())},
		{"duration", durationText(e.GetDuration())},
		{"http status", httpText(e.GetResponseStatus())},
	}
	if r := e.GetRerunOfExecutionId(); r != "" {
		rows = append(rows, [2]string{"re-run of", r})
	}
	if o := e.GetOverriddenFields(); len(o) > 0 {
		rows = append(rows, [2]string{"overridden", strings.Join(o, ", ")})
	}
	if r := e.GetReason(); r != "" {
		rows = append(rows, [2]string{"reason", oneLine(r, 200)})
	}
	if r := e.GetResponseExcerpt(); r != "" {
		rows = append(rows, [2]string{"response", oneLine(r, 200)})
	}
	rows = append(rows,
		[2]string{"trace id", orDash(e.GetTraceId())},
		[2]string{"trace", orDash(e.GetTraceUrl())},
		[2]string{"updated", timeText(e.GetUpdateTime())},
	)
	return rows
}

func historyStatsSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	since := fs.String("since", "", "window start (nominal time): RFC 3339, or a duration ago (default 24h before --until)")
	until := fs.String("until", "", "window end, exclusive: RFC 3339, or a duration ago (default now)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "JOB_ID"); err != nil {
			return err
		}
		req := &historyv1.GetJobStatsRequest{JobId: args[0]}
		var err error
		now := s.now()
		if req.StartTime, err = parseTimeArg("since", *since, now); err != nil {
			return err
		}
		if req.EndTime, err = parseTimeArg("until", *until, now); err != nil {
			return err
		}
		resp, err := s.history.GetJobStats(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		st := resp.Msg
		return s.out.Object(st, func() [][2]string {
			rows := [][2]string{
				{"job", args[0]},
				{"window", timeText(st.GetStartTime()) + " to " + timeText(st.GetEndTime())},
				{"runs", strconv.FormatInt(st.GetRuns(), 10)},
				{"succeeded", strconv.FormatInt(st.GetSuccesses(), 10)},
				{"failed", strconv.FormatInt(st.GetFailures(), 10)},
				{"missed", strconv.FormatInt(st.GetMissed(), 10)},
				{"skipped", strconv.FormatInt(st.GetSkipped(), 10)},
				{"success rate", successRate(st.GetSuccesses(), st.GetRuns())},
				{"duration p50", durationText(st.GetDurationP50())},
				{"duration p95", durationText(st.GetDurationP95())},
				{"duration p99", durationText(st.GetDurationP99())},
			}
			if last := st.GetLastRun(); last != nil {
				rows = append(rows,
					[2]string{"last run", fmt.Sprintf("%s %s (%s)", last.GetExecutionId(), statusText(last.GetStatus()), timeText(last.GetNominalTime()))},
					[2]string{"last trace", orDash(cmp.Or(last.GetTraceUrl(), last.GetTraceId()))},
				)
			} else {
				rows = append(rows, [2]string{"last run", "-"})
			}
			return rows
		})
	}
}

// successRate is successes/runs as a percentage, "-" without runs.
func successRate(successes, runs int64) string {
	if runs == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(successes)*100/float64(runs), 'f', 1, 64) + "%"
}
