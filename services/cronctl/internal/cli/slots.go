package cli

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	triggerv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1"
	"github.com/cronmesh/cronmesh/services/cronctl/internal/output"
)

// maxSlotsPage is the trigger's largest ListSlots page.
const maxSlotsPage = 1000

func slotsSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	limit := fs.Int("limit", 50, "at most this many slots, newest first (pages of up to 1000 are followed)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "JOB_ID"); err != nil {
			return err
		}
		if *limit < 1 {
			return usagef("--limit %d: want at least 1", *limit)
		}
		var (
			slots []proto.Message
			token string
			runs  *triggerv1.ListSlotsResponse // the first page's count
		)
		for len(slots) < *limit {
			resp, err := s.trigger.ListSlots(ctx, connect.NewRequest(&triggerv1.ListSlotsRequest{
				JobId: args[0], PageSize: int32(min(*limit-len(slots), maxSlotsPage)), PageToken: token,
			}))
			if err != nil {
				return err
			}
			if runs == nil {
				runs = resp.Msg
			}
			for _, sl := range resp.Msg.GetSlots() {
				slots = append(slots, sl)
			}
			token = resp.Msg.GetNextPageToken()
			if token == "" || len(resp.Msg.GetSlots()) == 0 {
				break
			}
		}
		if len(slots) > *limit {
			slots = slots[:*limit]
		}
		err := s.out.List(slots, "", []string{"EXECUTION", "NOMINAL TIME", "STATE", "TRIGGER", "RECORDED", "EPOCH"}, func(m proto.Message) []string {
			sl := m.(*triggerv1.Slot)
			return []string{sl.GetExecutionId(), timeText(sl.GetNominalTime()), slotStateText(sl.GetState()),
				triggerText(sl.GetTriggerKind()), timeText(sl.GetRecordTime()), strconv.FormatInt(sl.GetEpoch(), 10)}
		})
		if err != nil || s.out.Format() != output.Table {
			return err
		}
		return printRuns(s, runs)
	}
}

// printRuns prints, under a table of slots, a limited job's runs against
// its max_runs (nothing for a job without a limit).
func printRuns(s *session, r *triggerv1.ListSlotsResponse) error {
	if r.GetMaxRuns() <= 0 {
		return nil
	}
	line := fmt.Sprintf("runs: %d of %d", r.GetRunsFired(), r.GetMaxRuns())
	if r.GetCompleted() {
		line += " (completed: no more scheduled runs until max_runs is raised)"
	}
	_, err := fmt.Fprintln(s.env.Stdout, line)
	return err
}

// slotStateText is a slot state without its enum prefix, lower case.
func slotStateText(st triggerv1.SlotState) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "SLOT_STATE_"))
}

func backfillSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	from := fs.String("from", "", "first nominal time (inclusive): RFC 3339, or a duration ago (24h); required")
	to := fs.String("to", "", "last nominal time (inclusive): RFC 3339, or a duration ago (default now)")
	rate := fs.Int("rate", 0, "slots fired per second, 1 to 1000 (default: the trigger's, 100)")
	overlap := fs.String("overlap-policy", "", "the backfill's executions: "+overlapPolicyUsage+" (default: the job's)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "JOB_ID"); err != nil {
			return err
		}
		if *from == "" {
			return usagef("--from is required")
		}
		if *rate < 0 || *rate > 1000 {
			return usagef("--rate %d: want 1 to 1000", *rate)
		}
		now := s.now()
		req := &triggerv1.BackfillJobRequest{JobId: args[0], Rate: int32(*rate)}
		var err error
		if *overlap != "" {
			if req.OverlapPolicy, err = parseOverlapPolicy(*overlap); err != nil {
				return err
			}
		}
		if req.StartTime, err = parseTimeArg("from", *from, now); err != nil {
			return err
		}
		if req.EndTime, err = parseTimeArg("to", cmp.Or(*to, "0s"), now); err != nil {
			return err
		}
		if req.EndTime.AsTime().Before(req.StartTime.AsTime()) {
			return usagef("--to is before --from")
		}
		resp, err := s.trigger.BackfillJob(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		return s.out.Object(resp.Msg, func() [][2]string {
			return [][2]string{{"fired", strconv.Itoa(int(resp.Msg.GetFired()))}, {"already in the ledger", strconv.Itoa(int(resp.Msg.GetSkipped()))}}
		})
	}
}

func cancelSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "EXECUTION_ID"); err != nil {
			return err
		}
		resp, err := s.dispatcher.CancelExecution(ctx, connect.NewRequest(&dispatcherv1.CancelExecutionRequest{ExecutionId: args[0]}))
		if err != nil {
			return err
		}
		return s.out.Object(resp.Msg, func() [][2]string {
			return [][2]string{
				{"cancelled", args[0]},
				{"stage", strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(resp.Msg.GetStage().String(), "CANCEL_STAGE_")), "_", "-")},
				{"already cancelled", strconv.FormatBool(resp.Msg.GetAlreadyCancelled())},
			}
		})
	}
}
