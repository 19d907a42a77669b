package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"sigs.k8s.io/yaml"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
)

func alertsCommand() *command {
	return &command{name: "alerts", summary: "alert rules, notification channels and incidents (alerting AlertService)", subs: []*command{
		{name: "rules", summary: "when an incident opens", subs: []*command{
			{name: "list", summary: "list the rules in creation order", setup: rulesListSetup},
			{name: "get", args: "ID", summary: "show a rule", setup: rulesGetSetup},
			{name: "create", args: "[-f FILE] --name N (--consecutive-failures N | --missed-schedule D | --dead-lettered | --no-success-within D) --channel ID...", summary: "create a rule", setup: rulesCreateSetup},
			{name: "update", args: "ID [-f FILE] [flags]", summary: "change the given fields of a rule", setup: rulesUpdateSetup},
			{name: "delete", args: "ID", summary: "delete a rule (its open incidents resolve silently)", setup: rulesDeleteSetup},
		}},
		{name: "channels", summary: "where notifications go (webhook, email)", subs: []*command{
			{name: "list", summary: "list the channels", setup: channelsListSetup},
			{name: "get", args: "ID", summary: "show a channel (never its secret)", setup: channelsGetSetup},
			{name: "create", args: "[-f FILE] --name N (--webhook-url URL | --smtp-host H --from A --to A...) --secret-file F", summary: "create a channel", setup: channelsCreateSetup},
			{name: "update", args: "ID [-f FILE] [flags]", summary: "change the given fields of a channel (the secret is kept unless given)", setup: channelsUpdateSetup},
			{name: "delete", args: "ID", summary: "delete a channel no rule names", setup: channelsDeleteSetup},
			{name: "test", args: "ID", summary: "send a test notification now; exit 1 when the channel does not accept it", setup: channelsTestSetup},
		}},
		{name: "incidents", summary: "what the rules raised", subs: []*command{
			{name: "list", args: "[--state S] [--rule ID] [--job ID]", summary: "list incidents, newest first", setup: incidentsListSetup},
			{name: "get", args: "ID", summary: "show an incident", setup: incidentsGetSetup},
			{name: "ack", args: "ID", summary: "acknowledge an open incident", setup: incidentsAckSetup},
			{name: "resolve", args: "ID", summary: "resolve an incident by hand; its rule counts the job afresh from now", setup: incidentsResolveSetup},
		}},
	}}
}

// readMessage reads a YAML or JSON file of one message in proto JSON names
// into m (unknown fields are errors) and returns the top-level fields it
// sets, as written in the file.
func readMessage(s *session, path string, m proto.Message) ([]string, error) {
	data, err := s.env.ReadFile(path)
	if err != nil {
		return nil, err
	}
	raw, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	raw = bytes.TrimSpace(raw)
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("%s: want one object: %w", path, err)
	}
	if err := protojson.Unmarshal(raw, m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	fields := make([]string, 0, len(top))
	for k := range top {
		fields = append(fields, k)
	}
	slices.Sort(fields)
	return fields, nil
}

// optBool is a boolean flag that remembers whether it was given, so that
// an update changes it only when asked (--disabled, --disabled=false).
type optBool struct{ set, value bool }

func (b *optBool) String() string   { return strconv.FormatBool(b.value) }
func (b *optBool) IsBoolFlag() bool { return true }
func (b *optBool) Set(v string) error {
	p, err := strconv.ParseBool(v)
	if err != nil {
		return err
	}
	b.set, b.value = true, p
	return nil
}

// ruleFlags describe a rule on the command line.
type ruleFlags struct {
	file, name          string
	jobs, channels      stringList
	labels              keyValues
	consecutiveFailures int
	missedSchedule      time.Duration
	deadLettered        bool
	noSuccessWithin     time.Duration
	disabled            optBool
}

func (f *ruleFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.file, "f", "", "YAML or JSON file of one rule (alertingv1.Rule in proto JSON names); flags win over it")
	fs.StringVar(&f.name, "name", "", "display name")
	fs.Var(&f.jobs, "job", "watch this job id (repeatable; none: every job, or those with --label)")
	fs.Var(&f.labels, "label", "watch jobs with this label key=value (repeatable)")
	fs.IntVar(&f.consecutiveFailures, "consecutive-failures", 0, "open when this many executions in a row failed (1 to 1000)")
	fs.DurationVar(&f.missedSchedule, "missed-schedule", 0, "open when a slot is missed or fires later than this tolerance (1s to 24h)")
	fs.BoolVar(&f.deadLettered, "dead-lettered", false, "open when an execution is dead-lettered")
	fs.DurationVar(&f.noSuccessWithin, "no-success-within", 0, "open when the job has not succeeded for this long (1m to 366 days)")
	fs.Var(&f.channels, "channel", "notify this channel id (repeatable, 1 to 10)")
	fs.Var(&f.disabled, "disabled", "a disabled rule opens no incidents (--disabled=false enables it)")
}

// apply writes the given flags into r and returns the top-level fields they
// set (proto JSON names, as readMessage returns them).
func (f *ruleFlags) apply(r *alertingv1.Rule) ([]string, error) {
	var fields []string
	if f.name != "" {
		r.DisplayName, fields = f.name, append(fields, "displayName")
	}
	if len(f.jobs) > 0 || len(f.labels) > 0 {
		r.Selector, fields = &alertingv1.JobSelector{JobIds: f.jobs, Labels: f.labels}, append(fields, "selector")
	}
	conditions := 0
	if f.consecutiveFailures != 0 {
		r.Condition = &alertingv1.Rule_ConsecutiveFailures{ConsecutiveFailures: &alertingv1.ConsecutiveFailures{Count: int32(f.consecutiveFailures)}}
		conditions++
	}
	if f.missedSchedule != 0 {
		r.Condition = &alertingv1.Rule_MissedSchedule{MissedSchedule: &alertingv1.MissedSchedule{Tolerance: durationpb.New(f.missedSchedule)}}
		conditions++
	}
	if f.deadLettered {
		r.Condition = &alertingv1.Rule_DeadLettered{DeadLettered: &alertingv1.DeadLettered{}}
		conditions++
	}
	if f.noSuccessWithin != 0 {
		r.Condition = &alertingv1.Rule_NoSuccessWithin{NoSuccessWithin: &alertingv1.NoSuccessWithin{Duration: durationpb.New(f.noSuccessWithin)}}
		conditions++
	}
	if conditions > 1 {
		return nil, usagef("give one of --consecutive-failures, --missed-schedule, --dead-lettered and --no-success-within")
	}
	if conditions == 1 {
		fields = append(fields, "condition")
	}
	if len(f.channels) > 0 {
		r.ChannelIds, fields = f.channels, append(fields, "channelIds")
	}
	if f.disabled.set {
		r.Disabled, fields = f.disabled.value, append(fields, "disabled")
	}
	return fields, nil
}

// overlayRule copies the given top-level fields of from onto to (the
// oneof condition as a whole), for UpdateRule, which replaces the whole
// definition: what is not given keeps the stored value.
func overlayRule(to, from *alertingv1.Rule, fields []string) {
	for _, f := range fields {
		switch f {
		case "displayName", "display_name":
			to.DisplayName = from.GetDisplayName()
		case "selector":
			to.Selector = from.GetSelector()
		case "channelIds", "channel_ids":
			to.ChannelIds = from.GetChannelIds()
		case "disabled":
			to.Disabled = from.GetDisabled()
		case "condition", "consecutiveFailures", "consecutive_failures", "missedSchedule", "missed_schedule",
			"deadLettered", "dead_lettered", "noSuccessWithin", "no_success_within":
			to.Condition = from.GetCondition()
		}
	}
}

func conditionText(r *alertingv1.Rule) string {
	switch c := r.GetCondition().(type) {
	case *alertingv1.Rule_ConsecutiveFailures:
		return fmt.Sprintf("%d consecutive failures", c.ConsecutiveFailures.GetCount())
	case *alertingv1.Rule_MissedSchedule:
		return "missed schedule (tolerance " + durationText(c.MissedSchedule.GetTolerance()) + ")"
	case *alertingv1.Rule_DeadLettered:
		return "dead-lettered"
	case *alertingv1.Rule_NoSuccessWithin:
		return "no success within " + durationText(c.NoSuccessWithin.GetDuration())
	default:
		return "-"
	}
}

func selectorText(sel *alertingv1.JobSelector) string {
	var parts []string
	if ids := sel.GetJobIds(); len(ids) > 0 {
		parts = append(parts, strings.Join(ids, ","))
	}
	if len(sel.GetLabels()) > 0 {
		labels := keyValues(sel.GetLabels())
		parts = append(parts, labels.String())
	}
	if len(parts) == 0 {
		return "every job"
	}
	return strings.Join(parts, " with ")
}

func ruleRows(r *alertingv1.Rule) [][2]string {
	return [][2]string{
		{"id", r.GetId()},
		{"name", orDash(r.GetDisplayName())},
		{"condition", conditionText(r)},
		{"jobs", selectorText(r.GetSelector())},
		{"channels", strings.Join(r.GetChannelIds(), ", ")},
		{"disabled", strconv.FormatBool(r.GetDisabled())},
		{"created", timeText(r.GetCreateTime())},
		{"updated", timeText(r.GetUpdateTime())},
	}
}

func printRule(s *session, r *alertingv1.Rule) error {
	return s.out.Object(r, func() [][2]string { return ruleRows(r) })
}

// pageFlags are the paging flags of the alerting lists.
func rulesListSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	var p pageFlags
	p.register(fs)
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args); err != nil {
			return err
		}
		items, next, err := p.collect(func(token string) ([]proto.Message, string, error) {
			resp, err := s.alerts.ListRules(ctx, connect.NewRequest(&alertingv1.ListRulesRequest{PageSize: int32(p.size), PageToken: token}))
			if err != nil {
				return nil, "", err
			}
			return messages(resp.Msg.GetRules()), resp.Msg.GetNextPageToken(), nil
		})
		if err != nil {
			return err
		}
		return s.out.List(items, next, []string{"ID", "NAME", "CONDITION", "JOBS", "CHANNELS", "DISABLED"}, func(m proto.Message) []string {
			r := m.(*alertingv1.Rule)
			return []string{r.GetId(), orDash(r.GetDisplayName()), conditionText(r), oneLine(selectorText(r.GetSelector()), 60), strconv.Itoa(len(r.GetChannelIds())), strconv.FormatBool(r.GetDisabled())}
		})
	}
}

func rulesGetSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		resp, err := s.alerts.GetRule(ctx, connect.NewRequest(&alertingv1.GetRuleRequest{Id: args[0]}))
		if err != nil {
			return err
		}
		return printRule(s, resp.Msg.GetRule())
	}
}

func rulesCreateSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	var f ruleFlags
	f.register(fs)
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args); err != nil {
			return err
		}
		rule := &alertingv1.Rule{}
		if f.file != "" {
			if _, err := readMessage(s, f.file, rule); err != nil {
				return err
			}
		}
		if _, err := f.apply(rule); err != nil {
			return err
		}
		resp, err := s.alerts.CreateRule(ctx, connect.NewRequest(&alertingv1.CreateRuleRequest{Rule: rule}))
		if err != nil {
			return err
		}
		return printRule(s, resp.Msg.GetRule())
	}
}

func rulesUpdateSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	var f ruleFlags
	f.register(fs)
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		given := &alertingv1.Rule{}
		var fields []string
		if f.file != "" {
			var err error
			if fields, err = readMessage(s, f.file, given); err != nil {
				return err
			}
		}
		flagFields, err := f.apply(given)
		if err != nil {
			return err
		}
		fields = append(fields, flagFields...)
		if len(fields) == 0 {
			return usagef("nothing to change: give -f FILE or flags")
		}
		// UpdateRule replaces the definition: start from the stored rule so
		// that what is not given stays as it is.
		got, err := s.alerts.GetRule(ctx, connect.NewRequest(&alertingv1.GetRuleRequest{Id: args[0]}))
		if err != nil {
			return err
		}
		rule := got.Msg.GetRule()
		overlayRule(rule, given, fields)
		resp, err := s.alerts.UpdateRule(ctx, connect.NewRequest(&alertingv1.UpdateRuleRequest{Rule: rule}))
		if err != nil {
			return err
		}
		return printRule(s, resp.Msg.GetRule())
	}
}

func rulesDeleteSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		resp, err := s.alerts.DeleteRule(ctx, connect.NewRequest(&alertingv1.DeleteRuleRequest{Id: args[0]}))
		if err != nil {
			return err
		}
		return s.out.Object(resp.Msg, func() [][2]string { return [][2]string{{"deleted", args[0]}} })
	}
}

// channelFlags describe a channel on the command line. The secret (a
// webhook's signing secret or the SMTP password) is read from a file or an
// environment variable, never from a flag's value, which other users can
// see in the process list.
type channelFlags struct {
	file, name             string
	webhookURL             string
	smtpHost, smtpSecurity string
	smtpPort               int
	smtpUsername, from     string
	to                     stringList
	secretFile, secretEnv  string
}

func (f *channelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.file, "f", "", "YAML or JSON file of one channel (alertingv1.Channel in proto JSON names); flags win over it")
	fs.StringVar(&f.name, "name", "", "display name")
	fs.StringVar(&f.webhookURL, "webhook-url", "", "webhook channel: POST notifications to this http(s) URL")
	fs.StringVar(&f.smtpHost, "smtp-host", "", "email channel: SMTP server host")
	fs.IntVar(&f.smtpPort, "smtp-port", 0, "email channel: SMTP port (1 to 65535)")
	fs.StringVar(&f.smtpSecurity, "smtp-security", "", "email channel: starttls (default), tls or none")
	fs.StringVar(&f.smtpUsername, "smtp-username", "", "email channel: SMTP user (empty: no authentication)")
	fs.StringVar(&f.from, "from", "", "email channel: sender address")
	fs.Var(&f.to, "to", "email channel: recipient address (repeatable, 1 to 50)")
	fs.StringVar(&f.secretFile, "secret-file", "", `file holding the webhook signing secret ("whsec_...") or the SMTP password; "-" reads stdin`)
	fs.StringVar(&f.secretEnv, "secret-env", "", "environment variable holding the webhook signing secret or the SMTP password")
}

var smtpSecurities = map[string]alertingv1.SmtpSecurity{
	"starttls": alertingv1.SmtpSecurity_SMTP_SECURITY_STARTTLS,
	"tls":      alertingv1.SmtpSecurity_SMTP_SECURITY_TLS,
	"none":     alertingv1.SmtpSecurity_SMTP_SECURITY_NONE,
}

// secret reads the secret the flags name; "" when none is named.
func (f *channelFlags) secret(s *session) (string, error) {
	switch {
	case f.secretFile != "" && f.secretEnv != "":
		return "", usagef("give one of --secret-file and --secret-env")
	case f.secretFile != "":
		data, err := s.env.ReadFile(f.secretFile)
		if err != nil {
			return "", fmt.Errorf("--secret-file: %w", err)
		}
		secret := strings.TrimSpace(string(data))
		if secret == "" {
			return "", fmt.Errorf("--secret-file %s is empty", f.secretFile)
		}
		return secret, nil
	case f.secretEnv != "":
		v, ok := "", false
		if s.env.LookupEnv != nil {
			v, ok = s.env.LookupEnv(f.secretEnv)
		}
		if !ok || strings.TrimSpace(v) == "" {
			return "", fmt.Errorf("--secret-env: %s is not set", f.secretEnv)
		}
		return strings.TrimSpace(v), nil
	}
	return "", nil
}

// apply writes the given flags into c and returns the top-level fields they
// set. Webhook and email flags together are a usage error; a kind's flags
// change that kind's fields and keep the others (of c, which on update is
// the stored channel when it is of the same kind).
func (f *channelFlags) apply(c *alertingv1.Channel, secret string) ([]string, error) {
	var fields []string
	if f.name != "" {
		c.DisplayName, fields = f.name, append(fields, "displayName")
	}
	webhook := f.webhookURL != ""
	email := f.smtpHost != "" || f.smtpPort != 0 || f.smtpSecurity != "" || f.smtpUsername != "" || f.from != "" || len(f.to) > 0
	if webhook && email {
		return nil, usagef("a channel is a webhook (--webhook-url) or email (--smtp-*, --from, --to), not both")
	}
	switch {
	case webhook:
		w := c.GetWebhook()
		if w == nil {
			w = &alertingv1.WebhookChannel{}
		}
		w.Url = f.webhookURL
		c.Kind, fields = &alertingv1.Channel_Webhook{Webhook: w}, append(fields, "webhook")
	case email:
		e := c.GetEmail()
		if e == nil {
			e = &alertingv1.EmailChannel{}
		}
		if f.smtpHost != "" {
			e.Host = f.smtpHost
		}
		if f.smtpPort != 0 {
			e.Port = int32(f.smtpPort)
		}
		if f.smtpSecurity != "" {
			sec, ok := smtpSecurities[strings.ToLower(f.smtpSecurity)]
			if !ok {
				return nil, usagef("--smtp-security %q: want starttls, tls or none", f.smtpSecurity)
			}
			e.Security = sec
		}
		if f.smtpUsername != "" {
			e.Username = f.smtpUsername
		}
		if f.from != "" {
			e.From = f.from
		}
		if len(f.to) > 0 {
			e.To = f.to
		}
		c.Kind, fields = &alertingv1.Channel_Email{Email: e}, append(fields, "email")
	}
	if secret != "" {
		switch k := c.GetKind().(type) {
		case *alertingv1.Channel_Webhook:
			k.Webhook.SigningSecret = secret
		case *alertingv1.Channel_Email:
			k.Email.Password = secret
		default:
			return nil, usagef("a secret needs a webhook or email channel")
		}
		fields = append(fields, "secret")
	}
	return fields, nil
}

// overlayChannel copies the given top-level fields of from onto to.
func overlayChannel(to, from *alertingv1.Channel, fields []string) {
	for _, f := range fields {
		switch f {
		case "displayName", "display_name":
			to.DisplayName = from.GetDisplayName()
		case "webhook", "email":
			to.Kind = from.GetKind()
		}
	}
}

// channelText is where a channel delivers, for a person; never its secret.
func channelText(c *alertingv1.Channel) (kind, destination string) {
	switch k := c.GetKind().(type) {
	case *alertingv1.Channel_Webhook:
		return "webhook", k.Webhook.GetUrl()
	case *alertingv1.Channel_Email:
		return "email", strings.Join(k.Email.GetTo(), ", ")
	default:
		return "-", "-"
	}
}

// redactChannel clears a channel's input-only secrets before it is
// printed. The API never returns them; this keeps it so should a server
// (or a future field) echo one.
func redactChannel(c *alertingv1.Channel) *alertingv1.Channel {
	if c == nil {
		return nil
	}
	c = proto.CloneOf(c)
	if w := c.GetWebhook(); w != nil && w.GetSigningSecret() != "" {
		w.SigningSecret, w.HasSigningSecret = "", true
	}
	if e := c.GetEmail(); e != nil && e.GetPassword() != "" {
		e.Password, e.HasPassword = "", true
	}
	return c
}

func printChannel(s *session, c *alertingv1.Channel) error {
	c = redactChannel(c)
	return s.out.Object(c, func() [][2]string {
		kind, dest := channelText(c)
		rows := [][2]string{{"id", c.GetId()}, {"name", orDash(c.GetDisplayName())}, {"kind", kind}}
		switch k := c.GetKind().(type) {
		case *alertingv1.Channel_Webhook:
			rows = append(rows, [2]string{"url", dest}, [2]string{"signing secret", setText(k.Webhook.GetHasSigningSecret())})
		case *alertingv1.Channel_Email:
			e := k.Email
			rows = append(rows,
				[2]string{"smtp", fmt.Sprintf("%s:%d (%s)", e.GetHost(), e.GetPort(), securityText(e.GetSecurity()))},
				[2]string{"username", orDash(e.GetUsername())},
				[2]string{"password", setText(e.GetHasPassword())},
				[2]string{"from", e.GetFrom()},
				[2]string{"to", dest},
			)
		}
		return append(rows, [2]string{"created", timeText(c.GetCreateTime())}, [2]string{"updated", timeText(c.GetUpdateTime())})
	})
}

// setText says whether a secret is stored, which is all cronctl shows of it.
func setText(set bool) string {
	if set {
		return "set (never shown)"
	}
	return "none"
}

func securityText(s alertingv1.SmtpSecurity) string {
	if s == alertingv1.SmtpSecurity_SMTP_SECURITY_UNSPECIFIED {
		return "starttls"
	}
	return strings.ToLower(strings.TrimPrefix(s.String(), "SMTP_SECURITY_"))
}

func channelsListSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	var p pageFlags
	p.register(fs)
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args); err != nil {
			return err
		}
		items, next, err := p.collect(func(token string) ([]proto.Message, string, error) {
			resp, err := s.alerts.ListChannels(ctx, connect.NewRequest(&alertingv1.ListChannelsRequest{PageSize: int32(p.size), PageToken: token}))
			if err != nil {
				return nil, "", err
			}
			chans := make([]proto.Message, 0, len(resp.Msg.GetChannels()))
			for _, c := range resp.Msg.GetChannels() {
				chans = append(chans, redactChannel(c))
			}
			return chans, resp.Msg.GetNextPageToken(), nil
		})
		if err != nil {
			return err
		}
		return s.out.List(items, next, []string{"ID", "NAME", "KIND", "DESTINATION", "SECRET"}, func(m proto.Message) []string {
			c := m.(*alertingv1.Channel)
			kind, dest := channelText(c)
			secret := c.GetWebhook().GetHasSigningSecret() || c.GetEmail().GetHasPassword()
			return []string{c.GetId(), orDash(c.GetDisplayName()), kind, oneLine(dest, 60), setText(secret)}
		})
	}
}

func channelsGetSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		resp, err := s.alerts.GetChannel(ctx, connect.NewRequest(&alertingv1.GetChannelRequest{Id: args[0]}))
		if err != nil {
			return err
		}
		return printChannel(s, resp.Msg.GetChannel())
	}
}

// readChannelInput reads -f and the secret, and masks every secret from
// the output before any call is made.
func readChannelInput(s *session, f *channelFlags, c *alertingv1.Channel) (fields []string, secret string, err error) {
	if f.file != "" {
		if fields, err = readMessage(s, f.file, c); err != nil {
			return nil, "", err
		}
		s.mask(c.GetWebhook().GetSigningSecret())
		s.mask(c.GetEmail().GetPassword())
	}
	if secret, err = f.secret(s); err != nil {
		return nil, "", err
	}
	s.mask(secret)
	return fields, secret, nil
}

func channelsCreateSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	var f channelFlags
	f.register(fs)
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args); err != nil {
			return err
		}
		c := &alertingv1.Channel{}
		_, secret, err := readChannelInput(s, &f, c)
		if err != nil {
			return err
		}
		if _, err := f.apply(c, secret); err != nil {
			return err
		}
		resp, err := s.alerts.CreateChannel(ctx, connect.NewRequest(&alertingv1.CreateChannelRequest{Channel: c}))
		if err != nil {
			return err
		}
		return printChannel(s, resp.Msg.GetChannel())
	}
}

func channelsUpdateSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	var f channelFlags
	f.register(fs)
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		given := &alertingv1.Channel{}
		fields, secret, err := readChannelInput(s, &f, given)
		if err != nil {
			return err
		}
		got, err := s.alerts.GetChannel(ctx, connect.NewRequest(&alertingv1.GetChannelRequest{Id: args[0]}))
		if err != nil {
			return err
		}
		// UpdateChannel replaces the definition: start from the stored
		// channel (whose secret reads back empty, which keeps it), then the
		// file's fields, then the flags.
		c := got.Msg.GetChannel()
		overlayChannel(c, given, fields)
		flagFields, err := f.apply(c, secret)
		if err != nil {
			return err
		}
		if len(fields)+len(flagFields) == 0 {
			return usagef("nothing to change: give -f FILE or flags")
		}
		resp, err := s.alerts.UpdateChannel(ctx, connect.NewRequest(&alertingv1.UpdateChannelRequest{Channel: c}))
		if err != nil {
			return err
		}
		return printChannel(s, resp.Msg.GetChannel())
	}
}

func channelsDeleteSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		resp, err := s.alerts.DeleteChannel(ctx, connect.NewRequest(&alertingv1.DeleteChannelRequest{Id: args[0]}))
		if err != nil {
			return err
		}
		return s.out.Object(resp.Msg, func() [][2]string { return [][2]string{{"deleted", args[0]}} })
	}
}

// errNotDelivered: `channels test` reached the service but the channel did
// not accept the notification; exit 1 so scripts notice.
type errNotDelivered struct{ reason string }

func (e errNotDelivered) Error() string {
	return "the channel did not accept the test notification: " + e.reason
}

func channelsTestSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		resp, err := s.alerts.TestChannel(ctx, connect.NewRequest(&alertingv1.TestChannelRequest{Id: args[0]}))
		if err != nil {
			return err
		}
		if err := s.out.Object(resp.Msg, func() [][2]string {
			rows := [][2]string{{"channel", args[0]}, {"delivered", strconv.FormatBool(resp.Msg.GetDelivered())}}
			if e := resp.Msg.GetError(); e != "" {
				rows = append(rows, [2]string{"error", e})
			}
			return rows
		}); err != nil {
			return err
		}
		if !resp.Msg.GetDelivered() {
			return errNotDelivered{resp.Msg.GetError()}
		}
		return nil
	}
}

var incidentStates = map[string]alertingv1.IncidentState{
	"open":         alertingv1.IncidentState_INCIDENT_STATE_OPEN,
	"acknowledged": alertingv1.IncidentState_INCIDENT_STATE_ACKNOWLEDGED,
	"resolved":     alertingv1.IncidentState_INCIDENT_STATE_RESOLVED,
}

func stateText(s alertingv1.IncidentState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "INCIDENT_STATE_"))
}

func kindText(k alertingv1.IncidentKind) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k.String(), "INCIDENT_KIND_")), "_", "-")
}

func incidentsListSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	var p pageFlags
	p.register(fs)
	state := fs.String("state", "", "only incidents in this state: open, acknowledged or resolved")
	rule := fs.String("rule", "", "only this rule's incidents")
	job := fs.String("job", "", "only this job's incidents")
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args); err != nil {
			return err
		}
		req := &alertingv1.ListIncidentsRequest{RuleId: *rule, JobId: *job}
		if *state != "" {
			st, ok := incidentStates[strings.ToLower(*state)]
			if !ok {
				return usagef("--state %q: want open, acknowledged or resolved", *state)
			}
			req.State = st
		}
		items, next, err := p.collect(func(token string) ([]proto.Message, string, error) {
			req.PageSize, req.PageToken = int32(p.size), token
			resp, err := s.alerts.ListIncidents(ctx, connect.NewRequest(req))
			if err != nil {
				return nil, "", err
			}
			return messages(resp.Msg.GetIncidents()), resp.Msg.GetNextPageToken(), nil
		})
		if err != nil {
			return err
		}
		return s.out.List(items, next, []string{"ID", "STATE", "KIND", "JOB", "RULE", "OPENED", "RESOLVED", "SUMMARY"}, func(m proto.Message) []string {
			in := m.(*alertingv1.Incident)
			job := in.GetJobId()
			if n := in.GetJobDisplayName(); n != "" {
				job += " (" + n + ")"
			}
			return []string{in.GetId(), stateText(in.GetState()), kindText(in.GetKind()), job, in.GetRuleId(), timeText(in.GetOpenTime()), timeText(in.GetResolveTime()), oneLine(in.GetSummary(), 60)}
		})
	}
}

func printIncident(s *session, in *alertingv1.Incident) error {
	return s.out.Object(in, func() [][2]string {
		rows := [][2]string{
			{"id", in.GetId()},
			{"state", stateText(in.GetState())},
			{"kind", kindText(in.GetKind())},
			{"summary", in.GetSummary()},
			{"rule", in.GetRuleId()},
			{"job", in.GetJobId()},
			{"job name", orDash(in.GetJobDisplayName())},
			{"slot", timeText(in.GetSlotTime())},
			{"opened", timeText(in.GetOpenTime())},
			{"acknowledged", timeText(in.GetAcknowledgeTime())},
			{"resolved", timeText(in.GetResolveTime())},
		}
		if r := in.GetResolveReason(); r != "" {
			rows = append(rows, [2]string{"resolve reason", r})
		}
		if by := in.GetResolvedBy(); by != "" {
			rows = append(rows, [2]string{"resolved by", by})
		}
		return rows
	})
}

func incidentsGetSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		resp, err := s.alerts.GetIncident(ctx, connect.NewRequest(&alertingv1.GetIncidentRequest{Id: args[0]}))
		if err != nil {
			return err
		}
		return printIncident(s, resp.Msg.GetIncident())
	}
}

func incidentsAckSetup(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		resp, err := s.alerts.AcknowledgeIncident(ctx, connect.NewRequest(&alertingv1.AcknowledgeIncidentRequest{Id: args[0]}))
		if err != nil {
			return err
		}
		return printIncident(s, resp.Msg.GetIncident())
	}
}

func incidentsResolveSetup(*flag.FlagSet) func(context.Context, *session, []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		if err := exactArgs(args, "ID"); err != nil {
			return err
		}
		resp, err := s.alerts.ResolveIncident(ctx, connect.NewRequest(&alertingv1.ResolveIncidentRequest{Id: args[0]}))
		if err != nil {
			return err
		}
		return printIncident(s, resp.Msg.GetIncident())
	}
}
