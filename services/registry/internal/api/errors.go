package api

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/cronmesh/cronmesh/libs/quota"
	"github.com/cronmesh/cronmesh/libs/rpcerr"
	"github.com/cronmesh/cronmesh/services/registry/internal/store"
)

// toConnect maps an error from the store to the Connect code a client can act
// on. Internal details (SQL, hosts) never cross the wire: they are logged.
func (h *Handler) toConnect(ctx context.Context, procedure string, err error) error {
	var exceeded *quota.ExceededError
	switch {
	case errors.As(err, &exceeded):
		return exceeded.ConnectError()
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, store.ErrNotFound)
	case errors.Is(err, store.ErrEtagMismatch):
		return connect.NewError(connect.CodeAborted, store.ErrEtagMismatch)
	case errors.Is(err, store.ErrRequestIDReused):
		return connect.NewError(connect.CodeAlreadyExists, err)
	default:
		return rpcerr.Infrastructure(ctx, h.logger, procedure, "the job store", err)
	}
}
