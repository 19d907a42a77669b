package cli

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

// keyValues is a repeatable k=v flag.
type keyValues map[string]string

func (kv *keyValues) String() string {
	var parts []string
	for k, v := range *kv {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func (kv *keyValues) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	if *kv == nil {
		*kv = keyValues{}
	}
	(*kv)[k] = v
	return nil
}

// scheduleFlags describe a schedule on the command line.
type scheduleFlags struct {
	cron, tz, at string
	every, after time.Duration
}

func (f *scheduleFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cron, "cron", "", `cron expression ("*/5 * * * *", "@daily")`)
	fs.StringVar(&f.tz, "tz", "", "IANA time zone of the cron expression (default UTC)")
	fs.DurationVar(&f.every, "every", 0, "interval schedule: every this long (e.g. 1m)")
	fs.StringVar(&f.at, "at", "", "one-shot schedule: at this RFC 3339 instant")
	fs.DurationVar(&f.after, "after", 0, "one-shot schedule: this long after creation")
}

// schedule builds the Schedule and the update mask paths of what was given.
func (f *scheduleFlags) schedule() (*registryv1.Schedule, []string, error) {
	s := &registryv1.Schedule{TimeZone: f.tz}
	var paths []string
	kinds := 0
	if f.cron != "" {
		s.Kind, paths, kinds = &registryv1.Schedule_Cron{Cron: f.cron}, append(paths, "schedule.cron"), kinds+1
	}
	if f.every != 0 {
		s.Kind = &registryv1.Schedule_Interval{Interval: &registryv1.Interval{Every: durationpb.New(f.every)}}
		paths, kinds = append(paths, "schedule.interval"), kinds+1
	}
	if f.at != "" {
		t, err := time.Parse(time.RFC3339, f.at)
		if err != nil {
			return nil, nil, usagef("--at: want an RFC 3339 time such as 2030-01-02T15:04:05Z: %v", err)
		}
		s.Kind, paths, kinds = &registryv1.Schedule_At{At: timestamppb.New(t)}, append(paths, "schedule.at"), kinds+1
	}
	if f.after != 0 {
		s.Kind, paths, kinds = &registryv1.Schedule_After{After: durationpb.New(f.after)}, append(paths, "schedule.after"), kinds+1
	}
	if kinds > 1 {
		return nil, nil, usagef("give one of --cron, --every, --at and --after")
	}
	if f.tz != "" {
		paths = append(paths, "schedule.time_zone")
	}
	if len(paths) == 0 {
		return nil, nil, nil
	}
	return s, paths, nil
}

// jobFlags describe a job on the command line (create and update).
type jobFlags struct {
	file                 string
	name, description    string
	labels               keyValues
	sched                scheduleFlags
	url, method, body    string
	bodyTemplate         string
	headers              keyValues
	secretHeaders        keyValues
	exchange, routingKey string
	priority             string
	executionDeadline    time.Duration
	stopAtNextSlot       optionalBool
	overlapPolicy        string
	maxRuns              optionalInt
}

// optionalInt is an integer flag that knows whether it was given, so that
// 0 can be set on update.
type optionalInt struct {
	set   bool
	value int64
}

func (n *optionalInt) String() string { return strconv.FormatInt(n.value, 10) }
func (n *optionalInt) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return err
	}
	n.set, n.value = true, v
	return nil
}

// optionalBool is a boolean flag that knows whether it was given, so that
// an update changes only what the command line names.
type optionalBool struct{ set, value bool }

func (b *optionalBool) String() string   { return strconv.FormatBool(b.value) }
func (b *optionalBool) IsBoolFlag() bool { return true }
func (b *optionalBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	b.set, b.value = true, v
	return nil
}

func (f *jobFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.file, "f", "", "read the job from this YAML or JSON file (\"-\" for stdin); other flags override its fields")
	fs.StringVar(&f.name, "name", "", "display name")
	fs.StringVar(&f.description, "description", "", "description")
	fs.Var(&f.labels, "label", "label key=value (repeatable)")
	f.sched.register(fs)
	fs.StringVar(&f.url, "url", "", "HTTP target: the webhook URL")
	fs.StringVar(&f.method, "method", "", "HTTP target: method (default POST)")
	fs.StringVar(&f.body, "body", "", "target: request or message body, sent as written")
	fs.StringVar(&f.bodyTemplate, "body-template", "", `target: body filled in per attempt: {{nominal_time}}, {{fire_time}}, {{attempt}}, {{job_id}}, {{execution_id}}, {{trigger_kind}}, {{namespace}}; "{{{{" is a literal "{{"`)
	fs.Var(&f.headers, "header", "HTTP target: header Name=value (repeatable; Authorization, Cookie, X-Api-Key and the like are kept secret)")
	fs.Var(&f.secretHeaders, "secret-header", "HTTP target: write-only header Name=value, never shown again (repeatable; on update, replaces every secret header)")
	fs.StringVar(&f.exchange, "amqp-exchange", "", "AMQP target: exchange (empty: the default exchange)")
	fs.StringVar(&f.routingKey, "amqp-routing-key", "", "AMQP target: routing key")
	fs.StringVar(&f.priority, "priority", "", "high, normal or low")
	fs.DurationVar(&f.executionDeadline, "execution-deadline", 0, "no attempt starts this long after the slot's nominal time; the execution is dead-lettered \"deadline exceeded\" (1s to 168h, at least the attempt timeout)")
	fs.Var(&f.stopAtNextSlot, "stop-retries-at-next-slot", "no retry starts once the job's next slot fires (scheduled and catch-up slots)")
	fs.Var(&f.maxRuns, "max-runs", "complete the job after this many scheduled runs (0: unlimited; manual runs and backfills do not count)")
	fs.StringVar(&f.overlapPolicy, "overlap-policy", "", overlapPolicyUsage+" (default allow)")
}

// overlapPolicyUsage describes --overlap-policy.
const overlapPolicyUsage = "what a slot does while an execution of the job is in progress: allow (runs too), skip (recorded SKIPPED), buffer-one (waits; one at most), cancel-other (cancels the running one)"

// parseOverlapPolicy reads --overlap-policy: allow, skip, buffer-one or
// cancel-other (any case, "_" for "-").
func parseOverlapPolicy(s string) (registryv1.OverlapPolicy, error) {
	name := "OVERLAP_POLICY_" + strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
	p, ok := registryv1.OverlapPolicy_value[name]
	if !ok || p == 0 {
		return 0, usagef("--overlap-policy %q: want allow, skip, buffer-one or cancel-other", s)
	}
	return registryv1.OverlapPolicy(p), nil
}

// overlapPolicyText is the policy as --overlap-policy spells it.
func overlapPolicyText(p registryv1.OverlapPolicy) string {
	if p == registryv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED {
		return "allow"
	}
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(p.String(), "OVERLAP_POLICY_")), "_", "-")
}

// bodyAndFormat is the body --body or --body-template gives (at most one
// of them) and its format.
func (f *jobFlags) bodyAndFormat() (string, registryv1.BodyFormat, error) {
	switch {
	case f.body != "" && f.bodyTemplate != "":
		return "", 0, usagef("give --body or --body-template, not both")
	case f.bodyTemplate != "":
		return f.bodyTemplate, registryv1.BodyFormat_BODY_FORMAT_TEMPLATE, nil
	case f.body != "":
		return f.body, registryv1.BodyFormat_BODY_FORMAT_LITERAL, nil
	}
	return "", registryv1.BodyFormat_BODY_FORMAT_UNSPECIFIED, nil
}

// apply sets what the flags give on job and returns the mask paths.
func (f *jobFlags) apply(job *registryv1.Job) ([]string, error) {
	var paths []string
	if f.name != "" {
		job.DisplayName, paths = f.name, append(paths, "display_name")
	}
	if f.description != "" {
		job.Description, paths = f.description, append(paths, "description")
	}
	if len(f.labels) > 0 {
		job.Labels, paths = f.labels, append(paths, "labels")
	}
	s, sp, err := f.sched.schedule()
	if err != nil {
		return nil, err
	}
	if s != nil {
		if job.Schedule != nil && s.Kind == nil {
			job.Schedule.TimeZone = s.TimeZone
		} else {
			if job.Schedule != nil && s.TimeZone == "" {
				s.TimeZone = job.Schedule.TimeZone
			}
			job.Schedule = s
		}
		paths = append(paths, sp...)
	}
	isAMQP := f.exchange != "" || f.routingKey != ""
	if isAMQP && f.url != "" {
		return nil, usagef("give --url (HTTP) or --amqp-* (AMQP), not both")
	}
	body, format, err := f.bodyAndFormat()
	if err != nil {
		return nil, err
	}
	switch {
	case isAMQP:
		a := &registryv1.AmqpTarget{Exchange: f.exchange, RoutingKey: f.routingKey, Body: body, BodyFormat: format}
		job.Target, paths = &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: a}}, append(paths, "target")
	case f.url != "" || f.method != "" || body != "" || len(f.headers) > 0 || len(f.secretHeaders) > 0:
		h := job.GetTarget().GetHttp()
		if h == nil {
			h = &registryv1.HttpTarget{}
			job.Target = &registryv1.Target{Kind: &registryv1.Target_Http{Http: h}}
		}
		for flagVal, path := range map[*string]string{&f.url: "url", &f.method: "method"} {
			if *flagVal != "" {
				paths = append(paths, "target.http."+path)
			}
		}
		if f.url != "" {
			h.Url = f.url
		}
		if f.method != "" {
			h.Method = f.method
		}
		if body != "" {
			// The format goes with the body: --body on a templated job
			// makes it literal again.
			h.Body, h.BodyFormat = body, format
			paths = append(paths, "target.http.body", "target.http.body_format")
		}
		if len(f.headers) > 0 {
			h.Headers, paths = f.headers, append(paths, "target.http.headers")
		}
		if len(f.secretHeaders) > 0 {
			h.SecretHeaders, paths = f.secretHeaders, append(paths, "target.http.secret_headers")
		}
	}
	if f.priority != "" {
		p, ok := registryv1.Priority_value["PRIORITY_"+strings.ToUpper(f.priority)]
		if !ok {
			return nil, usagef("--priority: want high, normal or low")
		}
		job.Priority, paths = registryv1.Priority(p), append(paths, "priority")
	}
	if f.executionDeadline != 0 {
		job.ExecutionDeadline, paths = durationpb.New(f.executionDeadline), append(paths, "execution_deadline")
	}
	if f.stopAtNextSlot.set {
		job.StopRetriesAtNextSlot, paths = f.stopAtNextSlot.value, append(paths, "stop_retries_at_next_slot")
	}
	if f.overlapPolicy != "" {
		p, err := parseOverlapPolicy(f.overlapPolicy)
		if err != nil {
			return nil, err
		}
		job.OverlapPolicy, paths = p, append(paths, "overlap_policy")
	}
	if f.maxRuns.set {
		job.MaxRuns, paths = f.maxRuns.value, append(paths, "max_runs")
	}
	return paths, nil
}
