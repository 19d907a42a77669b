package rpcerr_test

import (
	"context"
	"errors"
	"fmt"
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
