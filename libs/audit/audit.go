package audit

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	auditv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/audit/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/audit/v1/auditv1connect"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/authz"
	"github.com/cronmesh/cronmesh/libs/migrate"
	"github.com/cronmesh/cronmesh/libs/server"
)

const (
	// migrationVersion is far above any service's own migrations so the
	// audit table's migration can join every service's list.
	migrationVersion = 1000
	// writeTimeout bounds a record's insert; the call's own deadline does
	// not apply (the call is over).
	writeTimeout = 5 * time.Second
	// maxObjectIDs caps the ids one record keeps (a batch of 1,000 jobs).
	maxObjectIDs = 1000
	// DefaultRetention is how long records are kept when Options leave it 0.
	DefaultRetention = 90 * 24 * time.Hour
	// pruneEvery is how often a process deletes the records past the
	// retention: lazily, after the first record written once it is due.
	pruneEvery = time.Hour
	// Page sizes of ListAuditEvents.
	defaultPageSize = 100
	maxPageSize     = 1000
)

// Migration creates the audit table in a service's schema; a service
// appends it to its own migrations.
func Migration() migrate.Migration {
	return migrate.New(migrationVersion, "audit_events", `
CREATE TABLE audit_events (
    id         uuid        PRIMARY KEY,
    namespace  text        NOT NULL,
    occur_time timestamptz NOT NULL,
    key_id     text        NOT NULL,
    procedure  text        NOT NULL,
    object_ids text[]      NOT NULL,
    code       text        NOT NULL
);
-- ListAuditEvents: a namespace's records, newest first (ids are UUIDv7).
CREATE INDEX audit_events_namespace_id ON audit_events (namespace, id DESC);
-- The retention's DELETE.
CREATE INDEX audit_events_occur_time ON audit_events (occur_time);
`)
}

// Options configure a Log.
type Options struct {
	// Pool is the service's database, with Migration applied; required.
	Pool *pgxpool.Pool
	// Logger receives records that could not be written; nil discards.
	Logger *slog.Logger
	// Retention is how long records are kept; 0 means DefaultRetention.
	Retention time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Log is a service's audit log in its database. It is both the interceptor
// that records calls and the AuditService handler that lists them.
type Log struct {
	auditv1connect.UnimplementedAuditServiceHandler

	pool      *pgxpool.Pool
	logger    *slog.Logger
	retention time.Duration
	now       func() time.Time
	// nextPrune is when the records past the retention are next deleted
	// (Unix nanoseconds); 0 means at the first record.
	nextPrune atomic.Int64
}

// New returns the audit log kept in opts.Pool's schema.
func New(opts Options) *Log {
	l := &Log{
		pool:      opts.Pool,
		logger:    cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		retention: cmp.Or(opts.Retention, DefaultRetention),
		now:       opts.Now,
	}
	if l.now == nil {
		l.now = time.Now
	}
	return l
}

// Interceptor returns the Connect handler interceptor that records every
// call that may change state once it ends. Install it outside the role
// interceptor (libs/authz) so refused calls are recorded too.
func (l *Log) Interceptor() connect.Interceptor { return interceptor{l} }

type interceptor struct{ log *Log }

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		if spec.IsClient {
			return next(ctx, req)
		}
		md, ok := authz.Method(spec)
		if ok && !authz.Mutating(md) {
			return next(ctx, req)
		}
		res, err := next(ctx, req)
		var resMsg any
		if res != nil {
			resMsg = res.Any()
		}
		i.log.record(ctx, spec.Procedure, objectIDs(req.Any(), resMsg), err)
		return res, err
	}
}

func (interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler records a stream that may change state when it
// ends, without object ids (the messages are the handler's).
func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		md, ok := authz.Method(conn.Spec())
		if ok && !authz.Mutating(md) {
			return next(ctx, conn)
		}
		err := next(ctx, conn)
		i.log.record(ctx, conn.Spec().Procedure, nil, err)
		return err
	}
}

// record writes one record; a call without a principal (refused by
// authentication before it got here) has nobody to record.
func (l *Log) record(ctx context.Context, procedure string, ids []string, callErr error) {
	p, ok := apikey.PrincipalFrom(ctx)
	if !ok {
		return
	}
	code := "ok"
	if callErr != nil {
		code = connect.CodeOf(callErr).String()
	}
	if ids == nil {
		ids = []string{} // the column is NOT NULL
	}
	id := uuid.Must(uuid.NewV7()).String()
	at := l.now().UTC()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	_, err := l.pool.Exec(ctx, `INSERT INTO audit_events (id, namespace, occur_time, key_id, procedure, object_ids, code)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, id, p.Namespace, at, p.KeyID, procedure, ids, code)
	if err != nil {
		l.logger.ErrorContext(ctx, "audit record not written", slog.Any("error", err),
			slog.String("namespace", p.Namespace), slog.String("key_id", p.KeyID), slog.String("procedure", procedure),
			slog.Any("object_ids", ids), slog.String("code", code), slog.Time("time", at))
	}
	l.pruneIfDue(ctx, at)
}

// pruneIfDue deletes the records older than the retention, at most once
// per pruneEvery per process. Every replica prunes; the DELETEs of two at
// once are harmless. Doing it after a write rather than on a timer keeps
// the log free of a lifecycle of its own.
func (l *Log) pruneIfDue(ctx context.Context, now time.Time) {
	due := l.nextPrune.Load()
	if now.UnixNano() < due || !l.nextPrune.CompareAndSwap(due, now.Add(pruneEvery).UnixNano()) {
		return
	}
	if _, err := l.pool.Exec(ctx, `DELETE FROM audit_events WHERE occur_time < $1`, now.Add(-l.retention)); err != nil {
		l.logger.WarnContext(ctx, "deleting audit records past the retention", slog.Any("error", err))
	}
}

// objectIDs returns the ids a call is about: the request's id fields ("id",
// "job_id", "execution_id"...) and those of the messages it carries (a
// job's, a rule's), or when the request names none (a create) the
// response's. An idempotency key (request_id) is not an object.
func objectIDs(req, res any) []string {
	var ids []string
	if m, ok := req.(proto.Message); ok {
		ids = idsOf(m.ProtoReflect(), true, ids)
	}
	if m, ok := res.(proto.Message); ok && len(ids) == 0 {
		ids = idsOf(m.ProtoReflect(), true, ids)
	}
	return ids
}

func idsOf(m protoreflect.Message, descend bool, ids []string) []string {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case len(ids) >= maxObjectIDs:
			return ids
		case fd.IsMap():
		case fd.Kind() == protoreflect.StringKind && !fd.IsList() && isIDField(fd.Name()):
			if v := m.Get(fd).String(); v != "" {
				ids = append(ids, v)
			}
		case descend && fd.Kind() == protoreflect.MessageKind && fd.IsList():
			list := m.Get(fd).List()
			for j := 0; j < list.Len() && len(ids) < maxObjectIDs; j++ {
				ids = idsOf(list.Get(j).Message(), false, ids)
			}
		case descend && fd.Kind() == protoreflect.MessageKind && m.Has(fd):
			ids = idsOf(m.Get(fd).Message(), false, ids)
		}
	}
	return ids
}

func isIDField(name protoreflect.Name) bool {
	if name == "request_id" {
		return false
	}
	return name == "id" || len(name) > 3 && name[len(name)-3:] == "_id"
}

// ListAuditEvents implements AuditService.ListAuditEvents: the caller's
// namespace's records, newest first.
func (l *Log) ListAuditEvents(ctx context.Context, req *connect.Request[auditv1.ListAuditEventsRequest]) (*connect.Response[auditv1.ListAuditEventsResponse], error) {
	p, ok := apikey.PrincipalFrom(ctx)
	if !ok {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("missing API key"))
	}
	size := int(req.Msg.GetPageSize())
	switch {
	case size < 0 || size > maxPageSize:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("page_size: must be 0 to %d", maxPageSize))
	case size == 0:
		size = defaultPageSize
	}
	if len(req.Msg.GetKeyId()) > 200 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("key_id: at most 200 characters"))
	}
	after := uuid.Max
	if tok := req.Msg.GetPageToken(); tok != "" {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err == nil {
			after, err = uuid.FromBytes(raw)
		}
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("page_token: not a token from ListAuditEvents"))
		}
	}
	rows, err := l.pool.Query(ctx, `SELECT id::text, occur_time, key_id, procedure, object_ids, code FROM audit_events
		WHERE namespace = $1 AND id < $2::uuid AND ($3 = '' OR key_id = $3)
		ORDER BY id DESC LIMIT $4`, p.Namespace, after.String(), req.Msg.GetKeyId(), size+1)
	if err != nil {
		return nil, l.unavailable(ctx, err)
	}
	var events []*auditv1.AuditEvent
	for rows.Next() {
		var (
			at time.Time
			ev auditv1.AuditEvent
		)
		if err := rows.Scan(&ev.Id, &at, &ev.KeyId, &ev.Procedure, &ev.ObjectIds, &ev.Code); err != nil {
			rows.Close()
			return nil, l.unavailable(ctx, err)
		}
		ev.Time = timestamppb.New(at)
		events = append(events, &ev)
	}
	if err := rows.Err(); err != nil {
		return nil, l.unavailable(ctx, err)
	}
	res := &auditv1.ListAuditEventsResponse{Events: events}
	if len(events) > size {
		res.Events = events[:size]
		last := uuid.MustParse(events[size-1].GetId())
		res.NextPageToken = base64.RawURLEncoding.EncodeToString(last[:])
	}
	return connect.NewResponse(res), nil
}

// unavailable logs a database failure and answers Unavailable without its
// details.
func (l *Log) unavailable(ctx context.Context, err error) error {
	l.logger.ErrorContext(ctx, "listing audit events", slog.Any("error", err))
	return connect.NewError(connect.CodeUnavailable, errors.New("the audit log cannot be read now"))
}

// Mount serves the AuditService on srv, behind the role interceptor like
// every other API of the service.
func (l *Log) Mount(srv *server.Server) {
	path, h := auditv1connect.NewAuditServiceHandler(l, srv.HandlerOptions(authz.NewInterceptor())...)
	srv.Handle(auditv1connect.AuditServiceName, path, h)
}
