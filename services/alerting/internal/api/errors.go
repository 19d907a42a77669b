package api

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/cronmesh/cronmesh/libs/rpcerr"
	"github.com/cronmesh/cronmesh/services/alerting/internal/store"
)

// toConnect maps an error from the store to the Connect code a client can
// act on: the one place the alerting service does so. Internal details (SQL,
// hosts) never cross the wire: they are logged.
func (h *Handler) toConnect(ctx context.Context, procedure string, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, store.ErrNotFound)
	case errors.Is(err, store.ErrChannelNotFound):
		return rpcerr.Invalid("rule.channel_ids", "%v", store.ErrChannelNotFound)
	case errors.Is(err, store.ErrChannelInUse):
		return connect.NewError(connect.CodeFailedPrecondition, store.ErrChannelInUse)
	case errors.Is(err, store.ErrIncidentResolved):
		return connect.NewError(connect.CodeFailedPrecondition, store.ErrIncidentResolved)
	default:
		return rpcerr.Infrastructure(ctx, h.logger, procedure, "the alerting store", err)
	}
}
