package api

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"

	"github.com/cronmesh/cronmesh/libs/rpcerr"
	"github.com/cronmesh/cronmesh/services/alerting/internal/store"
)

// toConnect maps an error from the store to the Connect code a client can
// act on: the one place the alerting service does so. Internal details (SQL,
// hosts) never cross the wire: they are logged.
func (h *Handler) toConnect(ctx context.Context, procedure string, err error) error {
	var connectErr *connect.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &connectErr):
		return err
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, store.ErrNotFound)
	case errors.Is(err, store.ErrChannelNotFound):
		return rpcerr.Invalid("rule.channel_ids", "%v", store.ErrChannelNotFound)
	case errors.Is(err, store.ErrChannelInUse):
		return connect.NewError(connect.CodeFailedPrecondition, store.ErrChannelInUse)
	case errors.Is(err, store.ErrIncidentResolved):
		return connect.NewError(connect.CodeFailedPrecondition, store.ErrIncidentResolved)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, context.Canceled)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, context.DeadlineExceeded)
	case rpcerr.IsUnavailable(err):
		h.logger.WarnContext(ctx, "database unavailable", slog.String("procedure", procedure), slog.Any("error", err))
		return connect.NewError(connect.CodeUnavailable, errors.New("the alerting store is unavailable; retry later"))
	default:
		h.logger.ErrorContext(ctx, "request failed", slog.String("procedure", procedure), slog.Any("error", err))
		return connect.NewError(connect.CodeInternal, errors.New("internal error"))
	}
}
