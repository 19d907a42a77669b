package api

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/cronmesh/cronmesh/libs/quota"
	"github.com/cronmesh/cronmesh/libs/rpcerr"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

// toConnect maps store and ring errors to Connect codes; internal details
// are logged, never returned.
func (h *Handler) toConnect(ctx context.Context, procedure string, err error) error {
	var exceeded *quota.ExceededError
	switch {
	case errors.As(err, &exceeded):
		return exceeded.ConnectError()
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, store.ErrNotFound)
	case errors.Is(err, store.ErrTooManySlots):
		return rpcerr.Invalid("end_time", "%v", err)
	case errors.Is(err, store.ErrInvalidRange):
		return rpcerr.Invalid("end_time", "%v", err)
	default:
		return rpcerr.Infrastructure(ctx, h.logger, procedure, "a dependency of the trigger", err)
	}
}
