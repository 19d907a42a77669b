package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
)

// Pending is a notification due for an attempt.
type Pending struct {
	ID       uuid.UUID
	Channel  *Channel
	Payload  []byte
	Attempts int
}

// ClaimDue returns up to limit notifications due at now, oldest first, and
// leases them for lease (their next attempt moves to now+lease), so another
// replica does not send them meanwhile. A sender that dies mid-attempt
// leaves them to be retried when the lease ends: delivery is at least once.
func (s *Store) ClaimDue(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]Pending, error) {
	rows, err := s.pool.Query(ctx, `
		WITH due AS (
		    SELECT id FROM notifications
		    WHERE sent_time IS NULL AND next_attempt_time <= $1
		    ORDER BY next_attempt_time LIMIT $3
		    FOR UPDATE SKIP LOCKED)
		UPDATE notifications n SET next_attempt_time = $2
		FROM due, channels c
		WHERE n.id = due.id AND c.id = n.channel_id
		RETURNING n.id, n.payload, n.attempts, c.id, c.spec, coalesce(c.secret, '')`,
		now, now.Add(lease), limit)
	if err != nil {
		return nil, err
	}
	var out []Pending
	var p Pending
	var chID uuid.UUID
	var spec []byte
	var secret string
	_, err = pgx.ForEachRow(rows, []any{&p.ID, &p.Payload, &p.Attempts, &chID, &spec, &secret}, func() error {
		def := &alertingv1.Channel{}
		if err := proto.Unmarshal(spec, def); err != nil {
			return err
		}
		def.Id = chID.String()
		out = append(out, Pending{ID: p.ID, Payload: append([]byte(nil), p.Payload...), Attempts: p.Attempts, Channel: &Channel{Def: def, Secret: secret}})
		return nil
	})
	return out, err
}

// MarkSent records a delivered notification.
func (s *Store) MarkSent(ctx context.Context, id uuid.UUID, now time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE notifications SET sent_time = $2, attempts = attempts + 1, last_error = '' WHERE id = $1`, id, now)
	return err
}

// MarkFailed records a failed attempt and when to try again.
func (s *Store) MarkFailed(ctx context.Context, id uuid.UUID, next time.Time, reason string) error {
	_, err := s.pool.Exec(ctx, `UPDATE notifications SET attempts = attempts + 1, next_attempt_time = $2, last_error = $3 WHERE id = $1`,
		id, next, truncate(reason, 1000))
	return err
}

// NotificationStats counts the notifications of an incident, for tests and
// operators: how many are sent and pending, and the attempts made.
type NotificationStats struct {
	Sent, Pending, Attempts int
}

// IncidentNotifications returns the stats of an incident's notifications.
func (s *Store) IncidentNotifications(ctx context.Context, incident string) (NotificationStats, error) {
	var st NotificationStats
	u, err := parseID(incident)
	if err != nil {
		return st, err
	}
	err = s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE sent_time IS NOT NULL), count(*) FILTER (WHERE sent_time IS NULL), coalesce(sum(attempts), 0)
		FROM notifications WHERE incident_id = $1`, u).Scan(&st.Sent, &st.Pending, &st.Attempts)
	return st, err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
