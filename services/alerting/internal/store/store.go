// Package store keeps the alerting schema: rules, channels, incidents, the
// jobs the job events describe, the execution events rules count, and the
// notification outbox.
package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	alertingv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/alerting/v1"
	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/services/alerting/internal/rules"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the migrations of the alerting schema.
func Migrations() ([]migrate.Migration, error) {
	dir, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	return migrate.Load(dir)
}

// Domain errors; the API maps them to Connect codes in one place.
var (
	// ErrNotFound: no such rule, channel or incident in the namespace.
	ErrNotFound = errors.New("not found")
	// ErrChannelNotFound: a rule names a channel the namespace lacks.
	ErrChannelNotFound = errors.New("a channel the rule names does not exist")
	// ErrChannelInUse: a rule still names the channel being deleted.
	ErrChannelInUse = errors.New("the channel is named by a rule; remove it from the rule first")
	// ErrIncidentResolved: the incident cannot be acknowledged any more.
	ErrIncidentResolved = errors.New("the incident is resolved")
)

// Incident states as stored (the values of alertingv1.IncidentState).
const (
	stateOpen         = int16(alertingv1.IncidentState_INCIDENT_STATE_OPEN)
	stateAcknowledged = int16(alertingv1.IncidentState_INCIDENT_STATE_ACKNOWLEDGED)
	stateResolved     = int16(alertingv1.IncidentState_INCIDENT_STATE_RESOLVED)
)

// Store reads and writes the alerting schema. Safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	now  func() time.Time
}

// Options for New.
type Options struct {
	// Pool is required.
	Pool *pgxpool.Pool
	// Now is the clock of the API writes (create, update, acknowledge
	// times). Default time.Now.
	Now func() time.Time
}

// New returns a Store.
func New(opts Options) *Store {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Store{pool: opts.Pool, now: now}
}

// Pool is the store's pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// parseID parses a UUID; anything else cannot exist, so it is ErrNotFound.
func parseID(id string) (uuid.UUID, error) {
	u, err := uuid.Parse(id)
	if err != nil {
		return uuid.UUID{}, ErrNotFound
	}
	return u, nil
}

func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, fn)
}

// --- rules ---

// CreateRule stores a new rule (its output-only fields are set here) and
// returns it. Every channel it names must exist in the namespace.
func (s *Store) CreateRule(ctx context.Context, ns string, r *alertingv1.Rule) (*alertingv1.Rule, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	now := s.now().UTC().Truncate(time.Microsecond)
	out := proto.CloneOf(r)
	out.Id, out.CreateTime, out.UpdateTime = id.String(), timestamppb.New(now), timestamppb.New(now)
	spec, err := ruleSpec(out)
	if err != nil {
		return nil, err
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO rules (id, namespace, spec, create_time, update_time) VALUES ($1, $2, $3, $4, $4)`,
			id, ns, spec, now); err != nil {
			return err
		}
		return setRuleChannels(ctx, tx, ns, id, r.GetChannelIds())
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ruleSpec is the stored form: the rule without its output-only fields.
func ruleSpec(r *alertingv1.Rule) ([]byte, error) {
	c := proto.CloneOf(r)
	c.Id, c.CreateTime, c.UpdateTime = "", nil, nil
	return proto.MarshalOptions{Deterministic: true}.Marshal(c)
}

func setRuleChannels(ctx context.Context, tx pgx.Tx, ns string, ruleID uuid.UUID, channelIDs []string) error {
	if _, err := tx.Exec(ctx, `DELETE FROM rule_channels WHERE rule_id = $1`, ruleID); err != nil {
		return err
	}
	ids := make([]uuid.UUID, 0, len(channelIDs))
	for _, c := range channelIDs {
		u, err := uuid.Parse(c)
		if err != nil {
			return ErrChannelNotFound
		}
		ids = append(ids, u)
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO rule_channels (rule_id, channel_id)
		SELECT $1, c.id FROM channels c WHERE c.namespace = $2 AND c.id = ANY($3)
		ON CONFLICT DO NOTHING`, ruleID, ns, ids)
	if err != nil {
		return err
	}
	if int(tag.RowsAffected()) != len(uniq(ids)) {
		return ErrChannelNotFound
	}
	return nil
}

func uniq(ids []uuid.UUID) map[uuid.UUID]struct{} {
	m := make(map[uuid.UUID]struct{}, len(ids))
	for _, id := range ids {
		m[id] = struct{}{}
	}
	return m
}

// GetRule returns a rule of the namespace.
func (s *Store) GetRule(ctx context.Context, ns, id string) (*alertingv1.Rule, error) {
	u, err := parseID(id)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT id, spec, create_time, update_time FROM rules WHERE namespace = $1 AND id = $2`, ns, u)
	if err != nil {
		return nil, err
	}
	list, err := collectRules(rows)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, ErrNotFound
	}
	return list[0], nil
}

// ListRules returns up to limit rules of the namespace after the id after
// (empty: from the start), in id (creation) order.
func (s *Store) ListRules(ctx context.Context, ns string, after uuid.UUID, limit int) ([]*alertingv1.Rule, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, spec, create_time, update_time FROM rules
		WHERE namespace = $1 AND id > $2 ORDER BY id LIMIT $3`, ns, after, limit)
	if err != nil {
		return nil, err
	}
	return collectRules(rows)
}

func collectRules(rows pgx.Rows) ([]*alertingv1.Rule, error) {
	var out []*alertingv1.Rule
	var id uuid.UUID
	var spec []byte
	var created, updated time.Time
	_, err := pgx.ForEachRow(rows, []any{&id, &spec, &created, &updated}, func() error {
		r := &alertingv1.Rule{}
		if err := proto.Unmarshal(spec, r); err != nil {
			return fmt.Errorf("rule %s: %w", id, err)
		}
		r.Id, r.CreateTime, r.UpdateTime = id.String(), timestamppb.New(created), timestamppb.New(updated)
		out = append(out, r)
		return nil
	})
	return out, err
}

// UpdateRule replaces a rule's definition.
func (s *Store) UpdateRule(ctx context.Context, ns string, r *alertingv1.Rule) (*alertingv1.Rule, error) {
	u, err := parseID(r.GetId())
	if err != nil {
		return nil, err
	}
	spec, err := ruleSpec(r)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC().Truncate(time.Microsecond)
	var created time.Time
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `UPDATE rules SET spec = $3, update_time = $4 WHERE namespace = $1 AND id = $2 RETURNING create_time`,
			ns, u, spec, now).Scan(&created)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		return setRuleChannels(ctx, tx, ns, u, r.GetChannelIds())
	})
	if err != nil {
		return nil, err
	}
	out := proto.CloneOf(r)
	out.CreateTime, out.UpdateTime = timestamppb.New(created), timestamppb.New(now)
	return out, nil
}

// DeleteRule deletes a rule and resolves its open incidents without
// notifying (their pending notifications are still sent).
func (s *Store) DeleteRule(ctx context.Context, ns, id string) error {
	u, err := parseID(id)
	if err != nil {
		return err
	}
	now := s.now().UTC()
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM rules WHERE namespace = $1 AND id = $2`, ns, u)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		_, err = tx.Exec(ctx, `UPDATE incidents SET state = $2, resolve_time = $3, resolve_reason = 'rule deleted'
			WHERE rule_id = $1 AND state <> $2`, u, stateResolved, now)
		return err
	})
}

// LoadRules compiles every rule of every namespace, for the evaluator.
func (s *Store) LoadRules(ctx context.Context) (*rules.Set, error) {
	rows, err := s.pool.Query(ctx, `SELECT r.namespace, r.id, r.spec, r.create_time FROM rules r`)
	if err != nil {
		return nil, err
	}
	var list []*rules.Rule
	var ns string
	var id uuid.UUID
	var spec []byte
	var created time.Time
	_, err = pgx.ForEachRow(rows, []any{&ns, &id, &spec, &created}, func() error {
		p := &alertingv1.Rule{}
		if err := proto.Unmarshal(spec, p); err != nil {
			return fmt.Errorf("rule %s: %w", id, err)
		}
		list = append(list, rules.Compile(ns, id.String(), p, created))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rules.NewSet(list), nil
}

// --- channels ---

// channelSecret takes the secret out of a channel definition (so the spec
// never holds it) and returns it.
func channelSecret(c *alertingv1.Channel) string {
	switch k := c.GetKind().(type) {
	case *alertingv1.Channel_Webhook:
		s := k.Webhook.GetSigningSecret()
		k.Webhook.SigningSecret, k.Webhook.HasSigningSecret = "", false
		return s
	case *alertingv1.Channel_Email:
		s := k.Email.GetPassword()
		k.Email.Password, k.Email.HasPassword = "", false
		return s
	}
	return ""
}

// markSecret sets the output-only has_* flag of a channel read back.
func markSecret(c *alertingv1.Channel, has bool) {
	switch k := c.GetKind().(type) {
	case *alertingv1.Channel_Webhook:
		k.Webhook.HasSigningSecret = has
	case *alertingv1.Channel_Email:
		k.Email.HasPassword = has
	}
}

// CreateChannel stores a channel and returns it without its secret.
func (s *Store) CreateChannel(ctx context.Context, ns string, c *alertingv1.Channel) (*alertingv1.Channel, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	now := s.now().UTC().Truncate(time.Microsecond)
	spec := proto.CloneOf(c)
	spec.Id, spec.CreateTime, spec.UpdateTime = "", nil, nil
	secret := channelSecret(spec)
	b, err := proto.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO channels (id, namespace, spec, secret, create_time, update_time) VALUES ($1, $2, $3, NULLIF($4, ''), $5, $5)`,
		id, ns, b, secret, now); err != nil {
		return nil, err
	}
	spec.Id, spec.CreateTime, spec.UpdateTime = id.String(), timestamppb.New(now), timestamppb.New(now)
	markSecret(spec, secret != "")
	return spec, nil
}

// Channel is a channel with its secret, for the senders.
type Channel struct {
	Def    *alertingv1.Channel
	Secret string
}

// GetChannel returns a channel of the namespace without its secret.
func (s *Store) GetChannel(ctx context.Context, ns, id string) (*alertingv1.Channel, error) {
	c, err := s.ChannelWithSecret(ctx, ns, id)
	if err != nil {
		return nil, err
	}
	return c.Def, nil
}

// ChannelWithSecret returns a channel of the namespace and its secret, for
// TestChannel.
func (s *Store) ChannelWithSecret(ctx context.Context, ns, id string) (*Channel, error) {
	u, err := parseID(id)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT id, spec, coalesce(secret, ''), create_time, update_time FROM channels WHERE namespace = $1 AND id = $2`, ns, u)
	if err != nil {
		return nil, err
	}
	list, err := collectChannels(rows)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, ErrNotFound
	}
	return list[0], nil
}

// ListChannels pages through the namespace's channels in id order.
func (s *Store) ListChannels(ctx context.Context, ns string, after uuid.UUID, limit int) ([]*alertingv1.Channel, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, spec, coalesce(secret, ''), create_time, update_time FROM channels
		WHERE namespace = $1 AND id > $2 ORDER BY id LIMIT $3`, ns, after, limit)
	if err != nil {
		return nil, err
	}
	list, err := collectChannels(rows)
	if err != nil {
		return nil, err
	}
	out := make([]*alertingv1.Channel, len(list))
	for i, c := range list {
		out[i] = c.Def
	}
	return out, nil
}

func collectChannels(rows pgx.Rows) ([]*Channel, error) {
	var out []*Channel
	var id uuid.UUID
	var spec []byte
	var secret string
	var created, updated time.Time
	_, err := pgx.ForEachRow(rows, []any{&id, &spec, &secret, &created, &updated}, func() error {
		c := &alertingv1.Channel{}
		if err := proto.Unmarshal(spec, c); err != nil {
			return fmt.Errorf("channel %s: %w", id, err)
		}
		c.Id, c.CreateTime, c.UpdateTime = id.String(), timestamppb.New(created), timestamppb.New(updated)
		markSecret(c, secret != "")
		out = append(out, &Channel{Def: c, Secret: secret})
		return nil
	})
	return out, err
}

// UpdateChannel replaces a channel's definition; an empty secret keeps the
// stored one.
func (s *Store) UpdateChannel(ctx context.Context, ns string, c *alertingv1.Channel) (*alertingv1.Channel, error) {
	u, err := parseID(c.GetId())
	if err != nil {
		return nil, err
	}
	now := s.now().UTC().Truncate(time.Microsecond)
	spec := proto.CloneOf(c)
	spec.Id, spec.CreateTime, spec.UpdateTime = "", nil, nil
	secret := channelSecret(spec)
	b, err := proto.Marshal(spec)
	if err != nil {
		return nil, err
	}
	var created time.Time
	var has bool
	err = s.pool.QueryRow(ctx, `UPDATE channels SET spec = $3, secret = coalesce(NULLIF($4, ''), secret), update_time = $5
		WHERE namespace = $1 AND id = $2 RETURNING create_time, secret IS NOT NULL`, ns, u, b, secret, now).Scan(&created, &has)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	spec.Id, spec.CreateTime, spec.UpdateTime = u.String(), timestamppb.New(created), timestamppb.New(now)
	markSecret(spec, has)
	return spec, nil
}

// DeleteChannel deletes a channel that no rule names.
func (s *Store) DeleteChannel(ctx context.Context, ns, id string) error {
	u, err := parseID(id)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM channels WHERE namespace = $1 AND id = $2`, ns, u)
	if isForeignKeyViolation(err) {
		return ErrChannelInUse
	}
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// --- incidents ---

// IncidentFilter narrows ListIncidents; zero fields do not filter.
type IncidentFilter struct {
	State  alertingv1.IncidentState
	RuleID uuid.UUID
	JobID  string
	// Before pages: only incidents with a smaller id (newer first).
	Before uuid.UUID
}

const incidentColumns = `id, rule_id, job_id, job_display_name, kind, state, summary, slot_time, open_time,
	acknowledge_time, resolve_time, resolve_reason, resolved_by`

// ListIncidents returns up to limit incidents of the namespace, newest
// first.
func (s *Store) ListIncidents(ctx context.Context, ns string, f IncidentFilter, limit int) ([]*alertingv1.Incident, error) {
	before := f.Before
	if before == (uuid.UUID{}) {
		before = uuid.Max
	}
	rows, err := s.pool.Query(ctx, `SELECT `+incidentColumns+` FROM incidents
		WHERE namespace = $1 AND id < $2
		  AND ($3 = 0 OR state = $3)
		  AND ($4 = '00000000-0000-0000-0000-000000000000'::uuid OR rule_id = $4)
		  AND ($5 = '' OR job_id = $5)
		ORDER BY id DESC LIMIT $6`, ns, before, int16(f.State), f.RuleID, f.JobID, limit)
	if err != nil {
		return nil, err
	}
	return collectIncidents(rows)
}

// GetIncident returns an incident of the namespace.
func (s *Store) GetIncident(ctx context.Context, ns, id string) (*alertingv1.Incident, error) {
	u, err := parseID(id)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+incidentColumns+` FROM incidents WHERE namespace = $1 AND id = $2`, ns, u)
	if err != nil {
		return nil, err
	}
	list, err := collectIncidents(rows)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, ErrNotFound
	}
	return list[0], nil
}

// AcknowledgeIncident marks an open incident acknowledged (again: no-op).
func (s *Store) AcknowledgeIncident(ctx context.Context, ns, id string) (*alertingv1.Incident, error) {
	u, err := parseID(id)
	if err != nil {
		return nil, err
	}
	var state int16
	err = s.pool.QueryRow(ctx, `UPDATE incidents SET state = CASE WHEN state = $3 THEN $4 ELSE state END,
			acknowledge_time = CASE WHEN state = $3 THEN $5 ELSE acknowledge_time END
		WHERE namespace = $1 AND id = $2 RETURNING state`,
		ns, u, stateOpen, stateAcknowledged, s.now().UTC()).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if state == stateResolved {
		return nil, ErrIncidentResolved
	}
	return s.GetIncident(ctx, ns, id)
}

// ResolveIncident resolves an open or acknowledged incident by hand, for
// the key keyID, and queues the resolution's notifications as an automatic
// one does. A resolved incident is returned as it is. From now on the
// incident's rule counts the job afresh (manualCut).
func (s *Store) ResolveIncident(ctx context.Context, ns, id, keyID string) (*alertingv1.Incident, error) {
	u, err := parseID(id)
	if err != nil {
		return nil, err
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		var state int16
		// FOR UPDATE: an evaluation resolving the same incident waits, then
		// finds it resolved and changes nothing.
		err := tx.QueryRow(ctx, `SELECT state FROM incidents WHERE namespace = $1 AND id = $2 FOR UPDATE`, ns, u).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil || state == stateResolved {
			return err
		}
		_, err = s.resolve(ctx, tx, u, "resolved by key "+keyID, keyID, s.now().UTC())
		return err
	})
	if err != nil {
		return nil, err
	}
	return s.GetIncident(ctx, ns, id)
}

func collectIncidents(rows pgx.Rows) ([]*alertingv1.Incident, error) {
	var out []*alertingv1.Incident
	var id, ruleID uuid.UUID
	var jobID, name, summary, reason, by string
	var kind, state int16
	var slot, ack, resolved *time.Time
	var opened time.Time
	_, err := pgx.ForEachRow(rows, []any{&id, &ruleID, &jobID, &name, &kind, &state, &summary, &slot, &opened, &ack, &resolved, &reason, &by}, func() error {
		out = append(out, &alertingv1.Incident{
			Id: id.String(), RuleId: ruleID.String(), JobId: jobID, JobDisplayName: name,
			Kind: alertingv1.IncidentKind(kind), State: alertingv1.IncidentState(state), Summary: summary,
			SlotTime: ts(slot), OpenTime: timestamppb.New(opened), AcknowledgeTime: ts(ack), ResolveTime: ts(resolved),
			ResolveReason: reason, ResolvedBy: by,
		})
		return nil
	})
	return out, err
}

func ts(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

// isForeignKeyViolation reports SQLSTATE 23503 (libs/postgres has no test
// for it, and one caller does not justify one there).
func isForeignKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503"
}
