// Package payload is the content of a notification: the JSON body a webhook
// receives (and that is stored with the notification, so every retry sends
// the same bytes), and the subject and text of an email written from it.
package payload

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
)

// Payload is the JSON body of a webhook notification, and what an email is
// written from. Type is "incident.opened", "incident.resolved" or
// "channel.test".
type Payload struct {
	Type           string    `json:"type"`
	NotificationID string    `json:"notification_id"`
	Incident       *Incident `json:"incident,omitempty"`
}

// Incident is the incident as a notification describes it.
type Incident struct {
	ID             string     `json:"id"`
	Namespace      string     `json:"namespace"`
	RuleID         string     `json:"rule_id"`
	JobID          string     `json:"job_id"`
	JobDisplayName string     `json:"job_display_name,omitempty"`
	Kind           string     `json:"kind"`
	Summary        string     `json:"summary"`
	SlotTime       *time.Time `json:"slot_time,omitempty"`
	OpenTime       time.Time  `json:"open_time"`
	ResolveTime    *time.Time `json:"resolve_time,omitempty"`
	ResolveReason  string     `json:"resolve_reason,omitempty"`
}

// Subject is the one-line title of a notification (the email subject).
func (p *Payload) Subject() string {
	if p.Incident == nil {
		return "[cronmesh] test notification"
	}
	name := cmp.Or(p.Incident.JobDisplayName, p.Incident.JobID)
	if p.Type == "incident.resolved" {
		return fmt.Sprintf("[cronmesh] RESOLVED %s: %s", name, p.Incident.Summary)
	}
	return fmt.Sprintf("[cronmesh] %s: %s", name, p.Incident.Summary)
}

// Text is the plain-text body of an email.
func (p *Payload) Text() string {
	if p.Incident == nil {
		return "This is a test notification from cronmesh alerting. The channel works.\n"
	}
	i := p.Incident
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", p.Subject())
	fmt.Fprintf(&b, "Incident:  %s\nNamespace: %s\nJob:       %s %s\nRule:      %s\nCondition: %s\n",
		i.ID, i.Namespace, i.JobID, i.JobDisplayName, i.RuleID, i.Kind)
	if i.SlotTime != nil {
		fmt.Fprintf(&b, "Slot:      %s\n", i.SlotTime.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(&b, "Opened:    %s\n", i.OpenTime.UTC().Format(time.RFC3339))
	if i.ResolveTime != nil {
		fmt.Fprintf(&b, "Resolved:  %s (%s)\n", i.ResolveTime.UTC().Format(time.RFC3339), i.ResolveReason)
	}
	return b.String()
}

// KindName is the payload's name of an incident kind.
func KindName(k alertingv1.IncidentKind) string {
	return strings.ToLower(strings.TrimPrefix(k.String(), "INCIDENT_KIND_"))
}
