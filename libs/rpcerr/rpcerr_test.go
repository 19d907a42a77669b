package rpcerr_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/cronmesh/cronmesh/libs/rpcerr"
)

func TestViolations(t *testing.T) {
	t.Parallel()
	var v rpcerr.Violations
	require.NoError(t, v.Err(), "no violations, no error")
	v.Add("job.schedule.cron", "bad field %d", 3)
	v.Add("job.target", "is required")
	err := v.Err()
	var cerr *connect.Error
	require.True(t, errors.As(err, &cerr))
	require.Equal(t, connect.CodeInvalidArgument, cerr.Code())
	require.Contains(t, cerr.Message(), "job.schedule.cron: bad field 3")
	require.Len(t, cerr.Details(), 1)
	detail, derr := cerr.Details()[0].Value()
	require.NoError(t, derr)
	br := detail.(*errdetails.BadRequest)
	require.Equal(t, "job.target", br.FieldViolations[1].Field)

	one := rpcerr.Invalid("page_token", "is not a token")
	require.ErrorAs(t, one, &cerr)
	require.Equal(t, "page_token: is not a token", cerr.Message())
}

func TestIsUnavailable(t *testing.T) {
	t.Parallel()
	_, dialErr := net.Dial("tcp", "127.0.0.1:1")
	require.Error(t, dialErr)
	_, pgErr := pgx.Connect(context.Background(), "postgres://postgres@127.0.0.1:1/x?connect_timeout=1")
	require.Error(t, pgErr)
	require.True(t, rpcerr.IsUnavailable(fmt.Errorf("wrapped: %w", dialErr)))
	require.True(t, rpcerr.IsUnavailable(pgErr))
	require.False(t, rpcerr.IsUnavailable(errors.New("syntax error")))
	require.False(t, rpcerr.IsUnavailable(pgx.ErrNoRows))
}

func TestInfrastructure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logged bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logged, nil))
	_, dialErr := net.Dial("tcp", "127.0.0.1:1")
	require.Error(t, dialErr)
	own := connect.NewError(connect.CodeAborted, errors.New("etag mismatch"))

	require.NoError(t, rpcerr.Infrastructure(ctx, logger, "/p", "the job store", nil))
	require.Same(t, own, rpcerr.Infrastructure(ctx, logger, "/p", "the job store", own))
	for _, tc := range []struct {
		err  error
		code connect.Code
	}{
		{fmt.Errorf("query: %w", context.Canceled), connect.CodeCanceled},
		{fmt.Errorf("query: %w", context.DeadlineExceeded), connect.CodeDeadlineExceeded},
		{fmt.Errorf("query: %w", dialErr), connect.CodeUnavailable},
		{errors.New("syntax error at or near SELEC"), connect.CodeInternal},
	} {
		got := rpcerr.Infrastructure(ctx, logger, "/p", "the job store", tc.err)
		require.Equal(t, tc.code, connect.CodeOf(got), "%v", tc.err)
		require.NotContains(t, got.Error(), "SELEC", "details stay in the log")
	}
	require.Contains(t, rpcerr.Infrastructure(ctx, logger, "/p", "the job store", dialErr).Error(), "the job store is unavailable; retry later")
	require.Contains(t, logged.String(), "SELEC", "an internal error is logged with its details")
}
