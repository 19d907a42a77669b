package api

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"

	"github.com/cronmesh/cronmesh/libs/quota"
	"github.com/cronmesh/cronmesh/libs/rpcerr"
	"github.com/cronmesh/cronmesh/services/registry/internal/history"
	"github.com/cronmesh/cronmesh/services/registry/internal/store"
)

// toConnect maps an error from the store or the history client to the
// Connect code a client can act on. Internal details (SQL, hosts) never cross the wire: they are logged.
func (h *Handler) toConnect(ctx context.Context, procedure string, err error) error {
	var (
		exceeded *quota.ExceededError
		refused  *history.RefusedError
	)
	switch {
	case errors.As(err, &exceeded):
		return exceeded.ConnectError()
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, store.ErrNotFound)
	case errors.Is(err, store.ErrEtagMismatch):
		return connect.NewError(connect.CodeAborted, store.ErrEtagMismatch)
	case errors.Is(err, store.ErrRequestIDReused):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.Is(err, history.ErrNotConfigured):
		return connect.NewError(connect.CodeUnimplemented, history.ErrNotConfigured)
	case errors.Is(err, history.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, history.ErrNotFound)
	case errors.Is(err, history.ErrNotFinished):
		return connect.NewError(connect.CodeFailedPrecondition, history.ErrNotFinished)
	case errors.As(err, &refused):
		return connect.NewError(refused.Code, history.ErrRefused)
	case errors.Is(err, history.ErrUnavailable):
		// The cause names the history's address: logged, not returned.
		h.logger.WarnContext(ctx, "the history service did not answer", slog.String("procedure", procedure), slog.Any("error", err))
		return connect.NewError(connect.CodeUnavailable, history.ErrUnavailable)
	default:
		return rpcerr.Infrastructure(ctx, h.logger, procedure, "the job store", err)
	}
}
