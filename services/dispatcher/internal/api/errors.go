package api

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

// errBroker marks a publish the broker did not confirm: the redrive did not
// happen (its dead letter is still there) and a retry may succeed.
var errBroker = errors.New("the broker did not take the message")

func violation(field, description string) *errdetails.BadRequest_FieldViolation {
	return &errdetails.BadRequest_FieldViolation{Field: field, Description: description}
}

// invalid returns INVALID_ARGUMENT with a google.rpc.BadRequest detail that
// names every wrong field.
func invalid(list []*errdetails.BadRequest_FieldViolation) error {
	msg := list[0].Field + ": " + list[0].Description
	if len(list) > 1 {
		msg += " (and more: see the BadRequest detail)"
	}
	err := connect.NewError(connect.CodeInvalidArgument, errors.New(msg))
	if detail, derr := connect.NewErrorDetail(&errdetails.BadRequest{FieldViolations: list}); derr == nil {
		err.AddDetail(detail)
	}
	return err
}

// toConnect maps store and broker errors to the Connect code a client can
// act on. Internal details (SQL, hosts) never cross the wire: they are
// logged.
func (h *Handler) toConnect(ctx context.Context, procedure string, err error) error {
	var connectErr *connect.Error
	switch {
	case errors.As(err, &connectErr):
		return err
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, store.ErrNotFound)
	case errors.Is(err, store.ErrInvalidID):
		return invalid([]*errdetails.BadRequest_FieldViolation{violation("execution_id", "is not a UUID")})
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, context.Canceled)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, context.DeadlineExceeded)
	case errors.Is(err, errBroker):
		h.logger.WarnContext(ctx, "broker unavailable", slog.String("procedure", procedure), slog.Any("error", err))
		return connect.NewError(connect.CodeUnavailable, errors.New("the message broker is unavailable; nothing was redriven, retry later"))
	case isUnavailable(err):
		h.logger.WarnContext(ctx, "database unavailable", slog.String("procedure", procedure), slog.Any("error", err))
		return connect.NewError(connect.CodeUnavailable, errors.New("the dead-letter store is unavailable; retry later"))
	default:
		h.logger.ErrorContext(ctx, "request failed", slog.String("procedure", procedure), slog.Any("error", err))
		return connect.NewError(connect.CodeInternal, errors.New("internal error"))
	}
}

// isUnavailable reports errors that mean "the database could not be
// reached" rather than "the request was wrong": a retry may succeed.
func isUnavailable(err error) bool {
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.As(err, &netErr) || errors.As(err, &connectErr) || pgconn.SafeToRetry(err)
}
