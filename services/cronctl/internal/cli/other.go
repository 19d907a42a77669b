package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	triggerv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1"
	"github.com/cronmesh/cronmesh/services/cronctl/internal/apply"
)

func deadLettersCommand() *command {
	return &command{name: "deadletters", summary: "executions the dispatcher gave up on (dispatcher DispatchService; alias dead-letters)", subs: []*command{
		{name: "list", summary: "list dead letters, newest first", setup: deadLettersListSetup},
		{name: "redrive", args: "ID | --all [--job JOB_ID]", summary: "deliver dead letters again (--url overrides an HTTP target for one)", setup: deadLettersRedriveSetup},
		{name: "purge", args: "ID", summary: "delete a dead letter without delivering it", setup: deadLettersPurgeSetup},
	}}
}

func deadLettersListSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	job := fs.String("job", "", "only this job's dead letters")
	pageSize := fs.Int("page-size", 0, "per page (default 50, at most 1000)")
	pageToken := fs.String("page-token", "", "the next page, from a previous list")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args); err != nil {
			return err
		}
		resp, err := s.dispatcher.ListDeadLetters(ctx, connect.NewRequest(&dispatcherv1.ListDeadLettersRequest{
			JobId: *job, PageSize: int32(*pageSize), PageToken: *pageToken,
		}))
		if err != nil {
			return err
		}
		items := make([]proto.Message, 0, len(resp.Msg.GetDeadLetters()))
		for _, d := range resp.Msg.GetDeadLetters() {
			items = append(items, d)
		}
		return s.out.List(items, resp.Msg.GetNextPageToken(), []string{"ID", "JOB", "NOMINAL TIME", "DEAD TIME", "ATTEMPT", "REASON"}, func(m proto.Message) []string {
			d := m.(*dispatcherv1.DeadLetter)
			return []string{d.GetId(), d.GetJobId(), timeText(d.GetNominalTime()), timeText(d.GetDeadTime()), strconv.Itoa(int(d.GetAttempt())), d.GetReason()}
		})
	}
}

func deadLettersRedriveSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	all := fs.Bool("all", false, "redrive every dead letter of the namespace (or of --job), at most 1000 a call")
	job := fs.String("job", "", "with --all: only this job's dead letters")
	url := fs.String("url", "", "for one dead letter: deliver to this URL instead of the job's HTTP target (keeps its secret)")
	return func(ctx context.Context, s *session, args []string) error {
		if *all {
			if len(args) != 0 || *url != "" {
				return usagef("--all takes no ID and no --url")
			}
			resp, err := s.dispatcher.RedriveDeadLetters(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLettersRequest{JobId: *job}))
			if err != nil {
				return err
			}
			return s.out.Object(resp.Msg, func() [][2]string { return [][2]string{{"redriven", strconv.Itoa(int(resp.Msg.GetRedriven()))}} })
		}
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		if *job != "" {
			return usagef("--job needs --all")
		}
		req := &dispatcherv1.RedriveDeadLetterRequest{Id: args[0]}
		if *url != "" {
			req.TargetOverride = &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: *url}}}
		}
		resp, err := s.dispatcher.RedriveDeadLetter(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		return s.out.Object(resp.Msg, func() [][2]string {
			return [][2]string{{"redriven", args[0]}, {"execution", resp.Msg.GetExecutionId()}}
		})
	}
}

func deadLettersPurgeSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		resp, err := s.dispatcher.PurgeDeadLetter(ctx, connect.NewRequest(&dispatcherv1.PurgeDeadLetterRequest{Id: args[0]}))
		if err != nil {
			return err
		}
		return s.out.Object(resp.Msg, func() [][2]string { return [][2]string{{"purged", args[0]}} })
	}
}

func ringStatusSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args); err != nil {
			return err
		}
		resp, err := s.trigger.GetRing(ctx, connect.NewRequest(&triggerv1.GetRingRequest{}))
		if err != nil {
			return err
		}
		ring := resp.Msg
		if s.out.Format() != "table" {
			return s.out.Object(ring, nil)
		}
		unowned := 0
		for _, p := range ring.GetPartitions() {
			if p.GetOwner() == "" {
				unowned++
			}
		}
		fmt.Fprintf(s.env.Stdout, "partitions: %d (%d without an owner)\n\n", ring.GetPartitionCount(), unowned)
		members := make([]proto.Message, 0, len(ring.GetMembers()))
		for _, m := range ring.GetMembers() {
			members = append(members, m)
		}
		return s.out.List(members, "", []string{"NODE", "ADDRESS", "JOINED", "PARTITIONS"}, func(m proto.Message) []string {
			mm := m.(*triggerv1.Member)
			return []string{mm.GetNodeId(), mm.GetAddress(), timeText(mm.GetJoinTime()), strconv.Itoa(int(mm.GetOwnedPartitions()))}
		})
	}
}

func configViewSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	return func(_ context.Context, s *session, args []string) error {
		if err := exactArgs(args); err != nil {
			return err
		}
		view := s.cfg.View()
		if s.out.Format() != "table" {
			raw, err := json.Marshal(view)
			if err != nil {
				return err
			}
			if s.out.Format() == "yaml" {
				if raw, err = yaml.JSONToYAML(raw); err != nil {
					return err
				}
			} else {
				raw = append(raw, '\n')
			}
			_, err = s.env.Stdout.Write(raw)
			return err
		}
		file := s.cfg.File
		if file == "" {
			file = "(none)"
		}
		apiKey := view.APIKey
		if apiKey == "" {
			apiKey = "(not set)"
		}
		rows := [][3]string{
			{"registryUrl", view.RegistryURL}, {"triggerUrl", view.TriggerURL}, {"dispatcherUrl", view.DispatcherURL},
			{"historyUrl", view.HistoryURL}, {"alertingUrl", view.AlertingURL},
			{"apiKey", apiKey}, {"output", view.Output}, {"timeout", view.Timeout},
			{"caFile", view.CAFile}, {"clientCert", view.ClientCert}, {"clientKey", view.ClientKey},
		}
		fmt.Fprintf(s.env.Stdout, "config file: %s\n", file)
		for _, r := range rows {
			fmt.Fprintf(s.env.Stdout, "%-14s %-28s (%s)\n", r[0]+":", r[1], s.cfg.Sources[r[0]])
		}
		return nil
	}
}

// applyResult is one line of apply's output for scripts.
type applyResult struct {
	Action        string   `json:"action"`
	Name          string   `json:"name"`
	ID            string   `json:"id,omitempty"`
	Source        string   `json:"source"`
	ChangedFields []string `json:"changedFields,omitempty"`
	Diff          string   `json:"diff,omitempty"`
}

func applySetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	var files stringList
	fs.Var(&files, "f", "YAML or JSON file of jobs (repeatable; \"-\" for stdin)")
	dryRun := fs.Bool("dry-run", false, "print what would change and change nothing; exit 3 when something would")
	return func(ctx context.Context, s *session, args []string) error {
		if len(args) != 0 || len(files) == 0 {
			return usagef("usage: cronctl apply -f FILE [-f FILE...] [--dry-run]")
		}
		var specs []apply.Spec
		for _, f := range files {
			data, err := s.env.ReadFile(f)
			if err != nil {
				return err
			}
			got, err := apply.Parse(f, data)
			if err != nil {
				return err
			}
			specs = append(specs, got...)
		}
		changes, err := apply.Plan(ctx, s.jobs, specs)
		if err != nil {
			return err
		}
		var jobs []*registryv1.Job
		if !*dryRun {
			jobs, err = apply.Execute(ctx, s.jobs, changes)
		}
		results := make([]applyResult, 0, len(changes))
		pending := false
		for i, c := range changes {
			r := applyResult{Action: string(c.Action), Name: c.Name(), ID: c.Existing.GetId(), Source: c.Spec.Source, ChangedFields: c.Mask, Diff: c.Diff}
			if i < len(jobs) && jobs[i] != nil {
				r.ID = jobs[i].GetId()
			} else if !*dryRun && c.Action != apply.Unchanged {
				break // Execute stopped here; err says why.
			}
			if c.Action != apply.Unchanged {
				pending = true
			}
			if !*dryRun {
				r.Action = map[apply.Action]string{apply.Create: "created", apply.Update: "updated", apply.Unchanged: "unchanged"}[c.Action]
			}
			results = append(results, r)
		}
		if perr := printApply(s, results, *dryRun); perr != nil && err == nil {
			err = perr
		}
		if err != nil {
			return err
		}
		if *dryRun && pending {
			return errDiff
		}
		return nil
	}
}

func printApply(s *session, results []applyResult, dryRun bool) error {
	if s.out.Format() != "table" {
		raw, err := json.MarshalIndent(map[string]any{"items": results, "dryRun": dryRun}, "", "  ")
		if err != nil {
			return err
		}
		if s.out.Format() == "yaml" {
			if raw, err = yaml.JSONToYAML(raw); err != nil {
				return err
			}
		} else {
			raw = append(raw, '\n')
		}
		_, err = s.env.Stdout.Write(raw)
		return err
	}
	counts := map[string]int{}
	for _, r := range results {
		counts[r.Action]++
		id := r.ID
		if id == "" {
			id = "new"
		}
		fmt.Fprintf(s.env.Stdout, "%s %q (%s, %s)\n", r.Action, r.Name, id, r.Source)
		if dryRun || r.Action == "updated" {
			for line := range strings.Lines(r.Diff) {
				fmt.Fprintf(s.env.Stdout, "    %s", line)
			}
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	summary := ""
	for _, k := range keys {
		summary += fmt.Sprintf("%s %d, ", k, counts[k])
	}
	if dryRun {
		summary = "dry run: " + summary + "nothing changed"
	} else {
		summary = summary[:max(0, len(summary)-2)]
	}
	_, err := fmt.Fprintln(s.env.Stdout, summary)
	return err
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return fmt.Sprint(*l) }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
