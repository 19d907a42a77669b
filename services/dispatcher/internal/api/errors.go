package api

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/cronmesh/cronmesh/libs/rpcerr"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

// errBroker marks a publish the broker did not confirm: the redrive did not
// happen (its dead letter is still there) and a retry may succeed.
var errBroker = errors.New("the broker did not take the message")

func violation(field, description string) *errdetails.BadRequest_FieldViolation {
	return &errdetails.BadRequest_FieldViolation{Field: field, Description: description}
}

// invalid returns INVALID_ARGUMENT with a google.rpc.BadRequest detail that
// names every wrong field (rpcerr builds it, as in every service).
func invalid(list []*errdetails.BadRequest_FieldViolation) error {
	var v rpcerr.Violations
	for _, fv := range list {
		v.Add(fv.Field, "%s", fv.Description)
	}
	return v.Err()
}

// toConnect maps store and broker errors to the Connect code a client can
// act on. Internal details (SQL, hosts) never cross the wire: they are
// logged.
func (h *Handler) toConnect(ctx context.Context, procedure string, err error) error {
	var cerr *connect.Error
	switch {
	case errors.As(err, &cerr):
		return cerr // an invalid target_override, found inside the redrive
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, store.ErrNotFound)
	case errors.Is(err, store.ErrInvalidID):
		return invalid([]*errdetails.BadRequest_FieldViolation{violation("execution_id", "is not a UUID")})
	case errors.Is(err, errBroker):
		h.logger.WarnContext(ctx, "broker unavailable", slog.String("procedure", procedure), slog.Any("error", err))
		return connect.NewError(connect.CodeUnavailable, errors.New("the message broker is unavailable; nothing was redriven, retry later"))
	default:
		return rpcerr.Infrastructure(ctx, h.logger, procedure, "the dead-letter store", err)
	}
}
