// Package rpcerr builds the Connect errors every service returns the same
// way: INVALID_ARGUMENT with a google.rpc.BadRequest detail naming each wrong
// field, and the test for "a dependency could not be reached" that turns a
// database error into UNAVAILABLE (retryable) rather than INTERNAL.
package rpcerr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// Violations collects field violations; the zero value is ready to use.
type Violations struct {
	list []*errdetails.BadRequest_FieldViolation
}

// Add records that field (a path such as "job.schedule.cron") is wrong.
func (v *Violations) Add(field, format string, args ...any) {
	v.list = append(v.list, &errdetails.BadRequest_FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
}

// List returns the violations in the order found; nil when there are none.
func (v *Violations) List() []*errdetails.BadRequest_FieldViolation { return v.list }

// Empty reports whether nothing was wrong.
func (v *Violations) Empty() bool { return len(v.list) == 0 }

// Err returns INVALID_ARGUMENT carrying every violation in a
// google.rpc.BadRequest detail, or nil when there is none. The message names
// the first violation, so a client that ignores details still learns what to
// fix.
func (v *Violations) Err() error {
	if v.Empty() {
		return nil
	}
	msg := v.list[0].Field + ": " + v.list[0].Description
	if len(v.list) > 1 {
		msg += " (and more: see the BadRequest detail)"
	}
	err := connect.NewError(connect.CodeInvalidArgument, errors.New(msg))
	if detail, derr := connect.NewErrorDetail(&errdetails.BadRequest{FieldViolations: v.list}); derr == nil {
		err.AddDetail(detail)
	}
	return err
}

// Invalid is the one-violation shorthand of Violations.Err.
func Invalid(field, format string, args ...any) error {
	var v Violations
	v.Add(field, format, args...)
	return v.Err()
}

// IsUnavailable reports errors that mean "a dependency could not be
// reached" rather than "the request was wrong": network errors, failed
// PostgreSQL connects, and errors pgx marks safe to retry. A retry may
// succeed, so they map to UNAVAILABLE.
func IsUnavailable(err error) bool {
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.As(err, &netErr) || errors.As(err, &connectErr) || pgconn.SafeToRetry(err)
}

// Infrastructure maps what is left of an error once a handler has mapped
// its own domain errors: nil stays nil, a *connect.Error passes through, a
// cancelled or expired context keeps its code, an unreachable dependency is
// UNAVAILABLE saying that unavailable (e.g. "the job store") may be retried,
// and anything else is INTERNAL. The details (SQL, hosts) are logged under
// procedure, never returned. Every service's handler ends its mapping here,
// so the codes of these cases cannot drift apart between services.
func Infrastructure(ctx context.Context, logger *slog.Logger, procedure, unavailable string, err error) error {
	var connectErr *connect.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &connectErr):
		return err
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, context.Canceled)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, context.DeadlineExceeded)
	case IsUnavailable(err):
		logger.WarnContext(ctx, "dependency unavailable", slog.String("procedure", procedure), slog.Any("error", err))
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("%s is unavailable; retry later", unavailable))
	default:
		logger.ErrorContext(ctx, "request failed", slog.String("procedure", procedure), slog.Any("error", err))
		return connect.NewError(connect.CodeInternal, errors.New("internal error"))
	}
}
