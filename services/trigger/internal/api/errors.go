package api

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

func violation(field, description string) *errdetails.BadRequest_FieldViolation {
	return &errdetails.BadRequest_FieldViolation{Field: field, Description: description}
}

// invalid returns INVALID_ARGUMENT with a google.rpc.BadRequest detail.
func invalid(list []*errdetails.BadRequest_FieldViolation) error {
	err := connect.NewError(connect.CodeInvalidArgument, errors.New(list[0].Field+": "+list[0].Description))
	if detail, derr := connect.NewErrorDetail(&errdetails.BadRequest{FieldViolations: list}); derr == nil {
		err.AddDetail(detail)
	}
	return err
}

// toConnect maps store and ring errors to Connect codes; internal details
// are logged, never returned.
func (h *Handler) toConnect(ctx context.Context, procedure string, err error) error {
	var connectErr *connect.Error
	switch {
	case errors.As(err, &connectErr):
		return err
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, store.ErrNotFound)
	case errors.Is(err, store.ErrTooManySlots):
		return invalid([]*errdetails.BadRequest_FieldViolation{violation("end_time", err.Error())})
	case errors.Is(err, store.ErrInvalidRange):
		return invalid([]*errdetails.BadRequest_FieldViolation{violation("end_time", err.Error())})
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, context.Canceled)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, context.DeadlineExceeded)
	case isUnavailable(err):
		h.logger.WarnContext(ctx, "dependency unavailable", slog.String("procedure", procedure), slog.Any("error", err))
		return connect.NewError(connect.CodeUnavailable, errors.New("a dependency of the trigger is unavailable; retry later"))
	default:
		h.logger.ErrorContext(ctx, "request failed", slog.String("procedure", procedure), slog.Any("error", err))
		return connect.NewError(connect.CodeInternal, errors.New("internal error"))
	}
}

func isUnavailable(err error) bool {
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.As(err, &netErr) || errors.As(err, &connectErr) || pgconn.SafeToRetry(err)
}
