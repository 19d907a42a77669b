package api

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/cronmesh/cronmesh/services/registry/internal/store"
	"github.com/cronmesh/cronmesh/services/registry/internal/validate"
)

// invalid returns INVALID_ARGUMENT with a google.rpc.BadRequest detail that
// names every wrong field.
func invalid(v *validate.Violations) error {
	err := connect.NewError(connect.CodeInvalidArgument, errors.New(summary(v.List())))
	if detail, derr := connect.NewErrorDetail(&errdetails.BadRequest{FieldViolations: v.List()}); derr == nil {
		err.AddDetail(detail)
	}
	return err
}

func summary(list []*errdetails.BadRequest_FieldViolation) string {
	if len(list) == 0 {
		return "invalid request"
	}
	msg := list[0].Field + ": " + list[0].Description
	if len(list) > 1 {
		msg += " (and more: see the BadRequest detail)"
	}
	return msg
}

// toConnect maps an error from the store to the Connect code a client can act
// on. Internal details (SQL, hosts) never cross the wire: they are logged.
func (h *Handler) toConnect(ctx context.Context, procedure string, err error) error {
	var connectErr *connect.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &connectErr):
		return err
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, store.ErrNotFound)
	case errors.Is(err, store.ErrEtagMismatch):
		return connect.NewError(connect.CodeAborted, store.ErrEtagMismatch)
	case errors.Is(err, store.ErrRequestIDReused):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, context.Canceled)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, context.DeadlineExceeded)
	case isUnavailable(err):
		h.logger.WarnContext(ctx, "database unavailable", slog.String("procedure", procedure), slog.Any("error", err))
		return connect.NewError(connect.CodeUnavailable, errors.New("the job store is unavailable; retry later"))
	default:
		h.logger.ErrorContext(ctx, "request failed", slog.String("procedure", procedure), slog.Any("error", err))
		return connect.NewError(connect.CodeInternal, errors.New("internal error"))
	}
}

// isUnavailable reports errors that mean "the database could not be reached"
// rather than "the request was wrong": a retry may succeed.
func isUnavailable(err error) bool {
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.As(err, &netErr) || errors.As(err, &connectErr) || pgconn.SafeToRetry(err)
}
