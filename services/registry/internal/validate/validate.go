package validate

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/jobspec"
	"github.com/cronmesh/cronmesh/libs/reqlimit"
	"github.com/cronmesh/cronmesh/libs/rpcerr"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
)

// Limits of a job definition. They bound what one job can cost the mesh
// (memory in the trigger, bytes on the broker, time in the dispatcher).
// A target's own limits are targetcheck's.
const (
	MaxDisplayName    = 200
	MaxDescription    = 2000
	MaxLabels         = reqlimit.MaxLabels
	MaxLabelKey       = reqlimit.MaxLabelKeyBytes
	MaxLabelValue     = reqlimit.MaxLabelValueBytes
	MaxRetries        = 10
	DefaultMaxRetries = 5
	MinBackoff        = time.Second
	MaxInitialBackoff = time.Hour
	MaxBackoff        = 24 * time.Hour
	DefaultBackoff    = time.Second
	DefaultMaxBackoff = 10 * time.Minute
	DefaultMultiplier = 2.0
	MaxMultiplier     = 10.0
	MaxCatchUpWindow  = 7 * 24 * time.Hour
	DefaultCatchUp    = time.Hour
	MaxSpreadWindow   = time.Hour
	// MinExecutionDeadline and MaxExecutionDeadline bound a job's
	// execution_deadline: past a week the data a run carries is stale for
	// any schedule, and a retry queue holding it that long is a leak.
	MinExecutionDeadline = time.Second
	MaxExecutionDeadline = 7 * 24 * time.Hour
	MaxRequestID         = 128
	// MaxPauseReason bounds PauseJobRequest.reason: a sentence or two, a
	// ticket link; it rides on every job event.
	MaxPauseReason = 512
	// MaxPauseAfterDeadLetters bounds pause_after_dead_letters; a job that
	// may fail more often in a row has no use for the option.
	MaxPauseAfterDeadLetters = 1000
	// MaxRuns bounds max_runs: a billion runs is 31 years of an
	// every-second job, so a larger limit is no limit.
	MaxRuns = 1_000_000_000
	// MaxCron bounds a cron expression: six fields of lists and ranges fit
	// with room to spare.
	MaxCron = 256
	// MaxTimeZone bounds a time zone name: the longest IANA name has 32
	// characters.
	MaxTimeZone = 64
)

// labelKeyPattern is a rule, not state: compiled once and never written.
var labelKeyPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._/-]*$`)

// RequestID checks a client idempotency key.
func RequestID(v *rpcerr.Violations, path, id string) {
	if len(id) > MaxRequestID || !utf8.ValidString(id) {
		v.Add(path, "must be valid UTF-8 of at most %d bytes", MaxRequestID)
	}
}

// Job checks job (at path, for example "job" or "requests[3].job") as it
// will be stored, given its create time, and fills its defaults in place;
// targets checks its target, as the job's namespace may publish. An HTTP
// target without a signing secret gets a new one. Output-only fields are
// the caller's business. It never stops at the first problem.
func Job(v *rpcerr.Violations, targets *targetcheck.Checker, path string, job *registryv1.Job, created time.Time) {
	if job == nil {
		v.Add(path, "is required")
		return
	}
	p := func(field string) string { return path + "." + field }

	checkText(v, p("display_name"), job.DisplayName, 1, MaxDisplayName)
	checkText(v, p("description"), job.Description, 0, MaxDescription)
	labels(v, p("labels"), job.Labels)

	if job.Schedule == nil {
		v.Add(p("schedule"), "is required")
	} else if ScheduleSize(v, p("schedule"), job.Schedule) {
		if _, errs := jobspec.Schedule(job.Schedule, created); errs != nil {
			for _, e := range errs {
				field := p("schedule")
				if e.Field != "" {
					field += "." + e.Field
				}
				v.Add(field, "%s", e.Description)
			}
		}
	}

	if job.Target == nil {
		v.Add(p("target"), "one of http or amqp is required")
	} else {
		targets.Target(v, p("target"), job.Namespace, job.Target)
	}
	if h := job.GetTarget().GetHttp(); h != nil && h.SigningSecret == "" {
		h.SigningSecret = NewSigningSecret()
	}
	retryPolicy(v, p("retry_policy"), job)

	job.CatchUpWindow = durationOrDefault(v, p("catch_up_window"), job.CatchUpWindow, DefaultCatchUp, 0, MaxCatchUpWindow)
	job.SpreadWindow = durationOrDefault(v, p("spread_window"), job.SpreadWindow, 0, 0, MaxSpreadWindow)
	executionDeadline(v, p("execution_deadline"), job)

	if n := job.PauseAfterDeadLetters; n < 0 || n > MaxPauseAfterDeadLetters {
		v.Add(p("pause_after_dead_letters"), "must be between 0 and %d, got %d", MaxPauseAfterDeadLetters, n)
	}
	if n := job.MaxRuns; n < 0 || n > MaxRuns {
		v.Add(p("max_runs"), "must be between 0 (unlimited) and %d, got %d", MaxRuns, n)
	}

	switch job.Priority {
	case registryv1.Priority_PRIORITY_UNSPECIFIED:
		job.Priority = registryv1.Priority_PRIORITY_NORMAL
	case registryv1.Priority_PRIORITY_HIGH, registryv1.Priority_PRIORITY_NORMAL, registryv1.Priority_PRIORITY_LOW:
	default:
		v.Add(p("priority"), "unknown priority %d", job.Priority)
	}
	if job.OverlapPolicy == registryv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED {
		job.OverlapPolicy = registryv1.OverlapPolicy_OVERLAP_POLICY_ALLOW
	} else {
		OverlapPolicy(v, p("overlap_policy"), job.OverlapPolicy)
	}
	if job.Schedule != nil && job.Schedule.TimeZone == "" {
		job.Schedule.TimeZone = jobspec.DefaultTimeZone
	}
}

// OverlapPolicy refuses a value the enum does not name; UNSPECIFIED is
// allowed (a job stores it as ALLOW, a run or backfill takes the job's).
func OverlapPolicy(v *rpcerr.Violations, path string, policy registryv1.OverlapPolicy) {
	if _, ok := registryv1.OverlapPolicy_name[int32(policy)]; !ok {
		v.Add(path, "unknown overlap policy %d", policy)
	}
}

// PauseReason checks PauseJobRequest.reason: text of at most
// MaxPauseReason characters, empty allowed.
func PauseReason(v *rpcerr.Violations, path, reason string) {
	checkText(v, path, reason, 0, MaxPauseReason)
}

// ScheduleSize checks the length of a schedule's strings (at path, for
// example "job.schedule"), which jobspec.Schedule then parses, and reports
// whether they are within their caps. The caps apply to requests only: a
// stored job is always read back.
func ScheduleSize(v *rpcerr.Violations, path string, s *registryv1.Schedule) bool {
	ok := reqlimit.Bytes(v, path+".cron", s.GetCron(), MaxCron)
	return reqlimit.Bytes(v, path+".time_zone", s.GetTimeZone(), MaxTimeZone) && ok
}

// NameQuery checks a search of display names (ListJobs' name_contains):
// valid UTF-8, no longer than a display name can be.
func NameQuery(v *rpcerr.Violations, field, q string) {
	checkText(v, field, q, 0, MaxDisplayName)
}

func checkText(v *rpcerr.Violations, field, s string, minLen, maxLen int) {
	n := utf8.RuneCountInString(s)
	switch {
	case !utf8.ValidString(s):
		v.Add(field, "must be valid UTF-8")
	case n < minLen:
		v.Add(field, "is required")
	case n > maxLen:
		v.Add(field, "must be at most %d characters, got %d", maxLen, n)
	}
}

func labels(v *rpcerr.Violations, field string, labels map[string]string) {
	if len(labels) > MaxLabels {
		v.Add(field, "at most %d labels, got %d", MaxLabels, len(labels))
		return
	}
	for _, k := range sortedKeys(labels) {
		if len(k) > MaxLabelKey || !labelKeyPattern.MatchString(k) {
			v.Add(fmt.Sprintf("%s[%q]", field, k), "key must be 1-%d characters of [a-z0-9._/-] starting with a letter or digit", MaxLabelKey)
		}
		if val := labels[k]; len(val) > MaxLabelValue || !utf8.ValidString(val) {
			v.Add(fmt.Sprintf("%s[%q]", field, k), "value must be valid UTF-8 of at most %d bytes", MaxLabelValue)
		}
	}
}

func retryPolicy(v *rpcerr.Violations, field string, job *registryv1.Job) {
	if job.RetryPolicy == nil {
		job.RetryPolicy = &registryv1.RetryPolicy{}
	}
	rp := job.RetryPolicy
	if rp.MaxRetries == nil {
		n := int32(DefaultMaxRetries)
		rp.MaxRetries = &n
	} else if *rp.MaxRetries < 0 || *rp.MaxRetries > MaxRetries {
		v.Add(field+".max_retries", "must be between 0 and %d, got %d", MaxRetries, *rp.MaxRetries)
	}
	rp.InitialBackoff = durationOrDefault(v, field+".initial_backoff", rp.InitialBackoff, DefaultBackoff, MinBackoff, MaxInitialBackoff)
	maxDefault := max(DefaultMaxBackoff, rp.InitialBackoff.AsDuration())
	rp.MaxBackoff = durationOrDefault(v, field+".max_backoff", rp.MaxBackoff, maxDefault, MinBackoff, MaxBackoff)
	if rp.MaxBackoff.AsDuration() < rp.InitialBackoff.AsDuration() {
		v.Add(field+".max_backoff", "must not be less than initial_backoff")
	}
	switch {
	case rp.Multiplier == 0:
		rp.Multiplier = DefaultMultiplier
	case rp.Multiplier < 1 || rp.Multiplier > MaxMultiplier || rp.Multiplier != rp.Multiplier:
		v.Add(field+".multiplier", "must be between 1 and %g", MaxMultiplier)
	}
}

// executionDeadline checks the optional execution_deadline: unset means
// none; set, it must leave room for at least one whole attempt, or the
// first attempt could be cut short by nothing but the deadline's arithmetic.
func executionDeadline(v *rpcerr.Violations, field string, job *registryv1.Job) {
	d := job.ExecutionDeadline
	if d == nil {
		return
	}
	if d.CheckValid() != nil {
		v.Add(field, "is not a valid duration")
		return
	}
	got := d.AsDuration()
	if got < MinExecutionDeadline || got > MaxExecutionDeadline {
		v.Add(field, "must be between %s and %s, got %s", MinExecutionDeadline, MaxExecutionDeadline, got)
		return
	}
	if timeout := job.GetTarget().GetHttp().GetTimeout(); timeout != nil && timeout.CheckValid() == nil && got < timeout.AsDuration() {
		v.Add(field, "must not be less than target.http.timeout (%s), got %s", timeout.AsDuration(), got)
	}
}

// durationOrDefault returns def when d is unset, and d otherwise, recording a
// violation when d is malformed or outside [lo, hi].
func durationOrDefault(v *rpcerr.Violations, field string, d *durationpb.Duration, def, lo, hi time.Duration) *durationpb.Duration {
	if d == nil {
		return durationpb.New(def)
	}
	if d.CheckValid() != nil {
		v.Add(field, "is not a valid duration")
		return d
	}
	if got := d.AsDuration(); got < lo || got > hi {
		v.Add(field, "must be between %s and %s, got %s", lo, hi, got)
	}
	return d
}

// NewSigningSecret returns a fresh Standard Webhooks secret: "whsec_" and the
// base64 of 32 random bytes.
func NewSigningSecret() string {
	var raw [32]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails on supported platforms.
	return "whsec_" + base64.StdEncoding.EncodeToString(raw[:])
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
