// Package api implements cronmesh.alerting.v1.AlertService over the store:
// request validation (every wrong field named), namespaces from the API
// key, paging, and the one mapping of domain errors to Connect codes.
package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/mail"
	"net/url"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1/alertingv1connect"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/reqlimit"
	"github.com/cronmesh/cronmesh/libs/rpcerr"
	"github.com/cronmesh/cronmesh/libs/webhooksign"
	"github.com/cronmesh/cronmesh/services/alerting/internal/store"
)

// Limits of the API.
const (
	DefaultPageSize    = 50
	MaxPageSize        = 1000
	MaxDisplayName     = 200
	MaxSelectorJobs    = 1000
	MaxRuleChannels    = 10
	MaxFailureCount    = 1000
	MinTolerance       = time.Second
	MaxTolerance       = 24 * time.Hour
	MinNoSuccessWithin = time.Minute
	MaxNoSuccessWithin = 366 * 24 * time.Hour
	MaxRecipients      = 50
	// MaxSMTPUsername and MaxSMTPPassword bound an email channel's
	// credentials.
	MaxSMTPUsername = 256
	MaxSMTPPassword = 1024
)

// Tester sends one test notification through a channel.
type Tester interface {
	Test(ctx context.Context, ch *store.Channel) error
}

// Handler implements alertingv1connect.AlertServiceHandler.
type Handler struct {
	store  *store.Store
	tester Tester
	// changed is called after a rule is written, so the evaluator reloads
	// its rules now rather than at its next refresh.
	changed func()
	logger  *slog.Logger
}

var _ alertingv1connect.AlertServiceHandler = (*Handler)(nil)

// NewHandler returns the handler. changed may be nil.
func NewHandler(s *store.Store, tester Tester, changed func(), logger *slog.Logger) *Handler {
	if changed == nil {
		changed = func() {}
	}
	return &Handler{store: s, tester: tester, changed: changed, logger: logger}
}

func namespace(ctx context.Context) (string, error) {
	ns, ok := apikey.NamespaceFrom(ctx)
	if !ok {
		return "", connect.NewError(connect.CodeUnauthenticated, errors.New("no authenticated namespace"))
	}
	return ns, nil
}

// CreateRule implements AlertService.CreateRule.
func (h *Handler) CreateRule(ctx context.Context, req *connect.Request[alertingv1.CreateRuleRequest]) (*connect.Response[alertingv1.CreateRuleResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	if err := validateRule(req.Msg.GetRule(), false); err != nil {
		return nil, err
	}
	r, err := h.store.CreateRule(ctx, ns, req.Msg.Rule)
	if err != nil {
		return nil, h.toConnect(ctx, "CreateRule", err)
	}
	h.changed()
	return connect.NewResponse(&alertingv1.CreateRuleResponse{Rule: r}), nil
}

// GetRule implements AlertService.GetRule.
func (h *Handler) GetRule(ctx context.Context, req *connect.Request[alertingv1.GetRuleRequest]) (*connect.Response[alertingv1.GetRuleResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	r, err := h.store.GetRule(ctx, ns, req.Msg.GetId())
	if err != nil {
		return nil, h.toConnect(ctx, "GetRule", err)
	}
	return connect.NewResponse(&alertingv1.GetRuleResponse{Rule: r}), nil
}

// ListRules implements AlertService.ListRules.
func (h *Handler) ListRules(ctx context.Context, req *connect.Request[alertingv1.ListRulesRequest]) (*connect.Response[alertingv1.ListRulesResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	size, after, err := page(req.Msg.GetPageSize(), req.Msg.GetPageToken())
	if err != nil {
		return nil, err
	}
	list, err := h.store.ListRules(ctx, ns, after, size+1)
	if err != nil {
		return nil, h.toConnect(ctx, "ListRules", err)
	}
	items, next := pageOf(list, size)
	return connect.NewResponse(&alertingv1.ListRulesResponse{Rules: items, NextPageToken: next}), nil
}

// UpdateRule implements AlertService.UpdateRule.
func (h *Handler) UpdateRule(ctx context.Context, req *connect.Request[alertingv1.UpdateRuleRequest]) (*connect.Response[alertingv1.UpdateRuleResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	if err := validateRule(req.Msg.GetRule(), true); err != nil {
		return nil, err
	}
	r, err := h.store.UpdateRule(ctx, ns, req.Msg.Rule)
	if err != nil {
		return nil, h.toConnect(ctx, "UpdateRule", err)
	}
	h.changed()
	return connect.NewResponse(&alertingv1.UpdateRuleResponse{Rule: r}), nil
}

// DeleteRule implements AlertService.DeleteRule.
func (h *Handler) DeleteRule(ctx context.Context, req *connect.Request[alertingv1.DeleteRuleRequest]) (*connect.Response[alertingv1.DeleteRuleResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	if err := h.store.DeleteRule(ctx, ns, req.Msg.GetId()); err != nil {
		return nil, h.toConnect(ctx, "DeleteRule", err)
	}
	h.changed()
	return connect.NewResponse(&alertingv1.DeleteRuleResponse{}), nil
}

// CreateChannel implements AlertService.CreateChannel.
func (h *Handler) CreateChannel(ctx context.Context, req *connect.Request[alertingv1.CreateChannelRequest]) (*connect.Response[alertingv1.CreateChannelResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	if err := validateChannel(req.Msg.GetChannel(), false); err != nil {
		return nil, err
	}
	c, err := h.store.CreateChannel(ctx, ns, req.Msg.Channel)
	if err != nil {
		return nil, h.toConnect(ctx, "CreateChannel", err)
	}
	return connect.NewResponse(&alertingv1.CreateChannelResponse{Channel: c}), nil
}

// GetChannel implements AlertService.GetChannel.
func (h *Handler) GetChannel(ctx context.Context, req *connect.Request[alertingv1.GetChannelRequest]) (*connect.Response[alertingv1.GetChannelResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	c, err := h.store.GetChannel(ctx, ns, req.Msg.GetId())
	if err != nil {
		return nil, h.toConnect(ctx, "GetChannel", err)
	}
	return connect.NewResponse(&alertingv1.GetChannelResponse{Channel: c}), nil
}

// ListChannels implements AlertService.ListChannels.
func (h *Handler) ListChannels(ctx context.Context, req *connect.Request[alertingv1.ListChannelsRequest]) (*connect.Response[alertingv1.ListChannelsResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	size, after, err := page(req.Msg.GetPageSize(), req.Msg.GetPageToken())
	if err != nil {
		return nil, err
	}
	list, err := h.store.ListChannels(ctx, ns, after, size+1)
	if err != nil {
		return nil, h.toConnect(ctx, "ListChannels", err)
	}
	items, next := pageOf(list, size)
	return connect.NewResponse(&alertingv1.ListChannelsResponse{Channels: items, NextPageToken: next}), nil
}

// UpdateChannel implements AlertService.UpdateChannel.
func (h *Handler) UpdateChannel(ctx context.Context, req *connect.Request[alertingv1.UpdateChannelRequest]) (*connect.Response[alertingv1.UpdateChannelResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	if err := validateChannel(req.Msg.GetChannel(), true); err != nil {
		return nil, err
	}
	c, err := h.store.UpdateChannel(ctx, ns, req.Msg.Channel)
	if err != nil {
		return nil, h.toConnect(ctx, "UpdateChannel", err)
	}
	return connect.NewResponse(&alertingv1.UpdateChannelResponse{Channel: c}), nil
}

// DeleteChannel implements AlertService.DeleteChannel.
func (h *Handler) DeleteChannel(ctx context.Context, req *connect.Request[alertingv1.DeleteChannelRequest]) (*connect.Response[alertingv1.DeleteChannelResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	if err := h.store.DeleteChannel(ctx, ns, req.Msg.GetId()); err != nil {
		return nil, h.toConnect(ctx, "DeleteChannel", err)
	}
	return connect.NewResponse(&alertingv1.DeleteChannelResponse{}), nil
}

// TestChannel implements AlertService.TestChannel.
func (h *Handler) TestChannel(ctx context.Context, req *connect.Request[alertingv1.TestChannelRequest]) (*connect.Response[alertingv1.TestChannelResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	c, err := h.store.ChannelWithSecret(ctx, ns, req.Msg.GetId())
	if err != nil {
		return nil, h.toConnect(ctx, "TestChannel", err)
	}
	resp := &alertingv1.TestChannelResponse{Delivered: true}
	if err := h.tester.Test(ctx, c); err != nil {
		// The caller owns the channel and needs the reason to fix it; the
		// senders' errors never carry the secret.
		resp.Delivered, resp.Error = false, err.Error()
	}
	return connect.NewResponse(resp), nil
}

// ListIncidents implements AlertService.ListIncidents.
func (h *Handler) ListIncidents(ctx context.Context, req *connect.Request[alertingv1.ListIncidentsRequest]) (*connect.Response[alertingv1.ListIncidentsResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	size, before, err := page(req.Msg.GetPageSize(), req.Msg.GetPageToken())
	if err != nil {
		return nil, err
	}
	var v rpcerr.Violations
	if !reqlimit.ID(&v, "job_id", req.Msg.GetJobId()) {
		return nil, v.Err()
	}
	f := store.IncidentFilter{State: req.Msg.GetState(), JobID: req.Msg.GetJobId(), Before: before}
	if _, ok := alertingv1.IncidentState_name[int32(f.State)]; !ok {
		return nil, rpcerr.Invalid("state", "unknown state %d", f.State)
	}
	if id := req.Msg.GetRuleId(); id != "" {
		if f.RuleID, err = uuid.Parse(id); err != nil {
			return nil, rpcerr.Invalid("rule_id", "is not a rule id")
		}
	}
	list, err := h.store.ListIncidents(ctx, ns, f, size+1)
	if err != nil {
		return nil, h.toConnect(ctx, "ListIncidents", err)
	}
	items, next := pageOf(list, size)
	return connect.NewResponse(&alertingv1.ListIncidentsResponse{Incidents: items, NextPageToken: next}), nil
}

// GetIncident implements AlertService.GetIncident.
func (h *Handler) GetIncident(ctx context.Context, req *connect.Request[alertingv1.GetIncidentRequest]) (*connect.Response[alertingv1.GetIncidentResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	inc, err := h.store.GetIncident(ctx, ns, req.Msg.GetId())
	if err != nil {
		return nil, h.toConnect(ctx, "GetIncident", err)
	}
	return connect.NewResponse(&alertingv1.GetIncidentResponse{Incident: inc}), nil
}

// AcknowledgeIncident implements AlertService.AcknowledgeIncident.
func (h *Handler) AcknowledgeIncident(ctx context.Context, req *connect.Request[alertingv1.AcknowledgeIncidentRequest]) (*connect.Response[alertingv1.AcknowledgeIncidentResponse], error) {
	ns, err := namespace(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	inc, err := h.store.AcknowledgeIncident(ctx, ns, req.Msg.GetId())
	if err != nil {
		return nil, h.toConnect(ctx, "AcknowledgeIncident", err)
	}
	return connect.NewResponse(&alertingv1.AcknowledgeIncidentResponse{Incident: inc}), nil
}

// ResolveIncident implements AlertService.ResolveIncident.
func (h *Handler) ResolveIncident(ctx context.Context, req *connect.Request[alertingv1.ResolveIncidentRequest]) (*connect.Response[alertingv1.ResolveIncidentResponse], error) {
	p, ok := apikey.PrincipalFrom(ctx)
	if !ok {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no authenticated namespace"))
	}
	if err := checkID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	inc, err := h.store.ResolveIncident(ctx, p.Namespace, req.Msg.GetId(), p.KeyID)
	if err != nil {
		return nil, h.toConnect(ctx, "ResolveIncident", err)
	}
	if inc.GetResolvedBy() == p.KeyID {
		h.logger.InfoContext(ctx, "incident resolved by hand", slog.String("namespace", p.Namespace),
			slog.String("incident_id", inc.GetId()), slog.String("key_id", p.KeyID))
	}
	return connect.NewResponse(&alertingv1.ResolveIncidentResponse{Incident: inc}), nil
}

// page validates a page size and decodes a page token (the base64 of the
// last id of the previous page).
func page(size int32, tok string) (int, uuid.UUID, error) {
	var v rpcerr.Violations
	if size < 0 || size > MaxPageSize {
		v.Add("page_size", "must be between 0 and %d, got %d", MaxPageSize, size)
	}
	var id uuid.UUID
	if !reqlimit.PageToken(&v, "page_token", tok) {
		return 0, id, v.Err()
	}
	if tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err == nil {
			id, err = uuid.ParseBytes(b)
		}
		if err != nil {
			v.Add("page_token", "is not a token this service returned")
		}
	}
	if err := v.Err(); err != nil {
		return 0, id, err
	}
	if size == 0 {
		size = DefaultPageSize
	}
	return int(size), id, nil
}

// pageOf cuts list, read with one item more than size, to a page, and
// returns it with the next page's token ("" after the last page).
func pageOf[T interface{ GetId() string }](list []T, size int) ([]T, string) {
	if len(list) <= size {
		return list, ""
	}
	return list[:size], token(list[size-1].GetId())
}

func token(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

// checkID refuses an id longer than any the service issues, before it
// reaches the store.
func checkID(id string) error {
	var v rpcerr.Violations
	reqlimit.ID(&v, "id", id)
	return v.Err()
}

// validateRule checks a rule; update says whether rule.id must name one.
func validateRule(r *alertingv1.Rule, update bool) error {
	var v rpcerr.Violations
	if r == nil {
		return rpcerr.Invalid("rule", "is required")
	}
	if update {
		if _, err := uuid.Parse(r.GetId()); err != nil {
			v.Add("rule.id", "is not a rule id")
		}
	}
	if len(r.GetDisplayName()) > MaxDisplayName {
		v.Add("rule.display_name", "must be at most %d bytes", MaxDisplayName)
	}
	if reqlimit.IDs(&v, "rule.selector.job_ids", r.GetSelector().GetJobIds(), MaxSelectorJobs) {
		for i, id := range r.GetSelector().GetJobIds() {
			if id == "" {
				v.Add(fmt.Sprintf("rule.selector.job_ids[%d]", i), "must not be empty")
			}
		}
	}
	if reqlimit.Labels(&v, "rule.selector.labels", r.GetSelector().GetLabels()) {
		for k := range r.GetSelector().GetLabels() {
			if k == "" {
				v.Add("rule.selector.labels", "keys must not be empty")
			}
		}
	}
	switch c := r.GetCondition().(type) {
	case *alertingv1.Rule_ConsecutiveFailures:
		if n := c.ConsecutiveFailures.GetCount(); n < 1 || n > MaxFailureCount {
			v.Add("rule.consecutive_failures.count", "must be between 1 and %d, got %d", MaxFailureCount, n)
		}
	case *alertingv1.Rule_MissedSchedule:
		checkDuration(&v, "rule.missed_schedule.tolerance", c.MissedSchedule.GetTolerance().AsDuration(),
			c.MissedSchedule.GetTolerance() != nil, MinTolerance, MaxTolerance)
	case *alertingv1.Rule_DeadLettered:
	case *alertingv1.Rule_NoSuccessWithin:
		checkDuration(&v, "rule.no_success_within.duration", c.NoSuccessWithin.GetDuration().AsDuration(),
			c.NoSuccessWithin.GetDuration() != nil, MinNoSuccessWithin, MaxNoSuccessWithin)
	default:
		v.Add("rule.condition", "one of consecutive_failures, missed_schedule, dead_lettered or no_success_within is required")
	}
	if n := len(r.GetChannelIds()); n < 1 || n > MaxRuleChannels {
		v.Add("rule.channel_ids", "must name 1 to %d channels, got %d", MaxRuleChannels, n)
		return v.Err()
	}
	for i, id := range r.GetChannelIds() {
		if _, err := uuid.Parse(id); err != nil {
			v.Add(fmt.Sprintf("rule.channel_ids[%d]", i), "is not a channel id")
		}
	}
	return v.Err()
}

func checkDuration(v *rpcerr.Violations, field string, d time.Duration, set bool, lo, hi time.Duration) {
	if !set || d < lo || d > hi {
		v.Add(field, "must be between %s and %s", lo, hi)
	}
}

// maxSigningSecret bounds a webhook channel's secret: "whsec_" and the
// base64 of at most webhooksign.MaxSecretBytes.
const maxSigningSecret = len("whsec_") + (webhooksign.MaxSecretBytes+2)/3*4

// validateChannel checks a channel; on update an empty secret keeps the
// stored one, on create a webhook needs one.
func validateChannel(c *alertingv1.Channel, update bool) error {
	var v rpcerr.Violations
	if c == nil {
		return rpcerr.Invalid("channel", "is required")
	}
	if update {
		if _, err := uuid.Parse(c.GetId()); err != nil {
			v.Add("channel.id", "is not a channel id")
		}
	}
	if len(c.GetDisplayName()) > MaxDisplayName {
		v.Add("channel.display_name", "must be at most %d bytes", MaxDisplayName)
	}
	switch k := c.GetKind().(type) {
	case *alertingv1.Channel_Webhook:
		if reqlimit.Bytes(&v, "channel.webhook.url", k.Webhook.GetUrl(), reqlimit.MaxURLBytes) {
			u, err := url.Parse(k.Webhook.GetUrl())
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				v.Add("channel.webhook.url", "must be an absolute http or https URL")
			}
		}
		switch secret := k.Webhook.GetSigningSecret(); {
		case !reqlimit.Bytes(&v, "channel.webhook.signing_secret", secret, maxSigningSecret):
		case secret == "" && !update:
			v.Add("channel.webhook.signing_secret", "is required")
		case secret != "":
			if _, err := webhooksign.Sign(secret, "check", time.Unix(0, 0), nil); err != nil {
				v.Add("channel.webhook.signing_secret", `must be "whsec_" and the base64 of %d to %d bytes`,
					webhooksign.MinSecretBytes, webhooksign.MaxSecretBytes)
			}
		}
	case *alertingv1.Channel_Email:
		e := k.Email
		if e.GetHost() == "" {
			v.Add("channel.email.host", "is required")
		}
		reqlimit.Bytes(&v, "channel.email.host", e.GetHost(), reqlimit.MaxHostBytes)
		reqlimit.Bytes(&v, "channel.email.username", e.GetUsername(), MaxSMTPUsername)
		reqlimit.Bytes(&v, "channel.email.password", e.GetPassword(), MaxSMTPPassword)
		if e.GetPort() < 1 || e.GetPort() > 65535 {
			v.Add("channel.email.port", "must be between 1 and 65535, got %d", e.GetPort())
		}
		if _, ok := alertingv1.SmtpSecurity_name[int32(e.GetSecurity())]; !ok {
			v.Add("channel.email.security", "unknown security %d", e.GetSecurity())
		}
		if e.GetPassword() != "" && e.GetUsername() == "" {
			v.Add("channel.email.username", "is required with a password")
		}
		if reqlimit.Bytes(&v, "channel.email.from", e.GetFrom(), reqlimit.MaxEmailAddressBytes) {
			if _, err := mail.ParseAddress(e.GetFrom()); err != nil {
				v.Add("channel.email.from", "is not an email address")
			}
		}
		if n := len(e.GetTo()); n < 1 || n > MaxRecipients {
			v.Add("channel.email.to", "must list 1 to %d addresses, got %d", MaxRecipients, n)
			break
		}
		for i, to := range e.GetTo() {
			field := fmt.Sprintf("channel.email.to[%d]", i)
			if !reqlimit.Bytes(&v, field, to, reqlimit.MaxEmailAddressBytes) {
				continue
			}
			if _, err := mail.ParseAddress(to); err != nil {
				v.Add(field, "is not an email address")
			}
		}
	default:
		v.Add("channel.kind", "one of webhook or email is required")
	}
	return v.Err()
}
