package api

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"

	"github.com/cronmesh/cronmesh/libs/rpcerr"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

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
		return rpcerr.Invalid("end_time", "%v", err)
	case errors.Is(err, store.ErrInvalidRange):
		return rpcerr.Invalid("end_time", "%v", err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, context.Canceled)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, context.DeadlineExceeded)
	case rpcerr.IsUnavailable(err):
		h.logger.WarnContext(ctx, "dependency unavailable", slog.String("procedure", procedure), slog.Any("error", err))
		return connect.NewError(connect.CodeUnavailable, errors.New("a dependency of the trigger is unavailable; retry later"))
	default:
		h.logger.ErrorContext(ctx, "request failed", slog.String("procedure", procedure), slog.Any("error", err))
		return connect.NewError(connect.CodeInternal, errors.New("internal error"))
	}
}
