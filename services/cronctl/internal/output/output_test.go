package output_test

import (
	"bytes"
	"errors"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/cronmesh/cronmesh/services/cronctl/internal/output"
)

func TestRedactor(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := output.NewRedactor(&buf, "k3y-0123456789abcdef")
	n, err := w.Write([]byte("Bearer k3y-0123456789abcdef and again k3y-0123456789abcdef\n"))
	require.NoError(t, err)
	require.Equal(t, 59, n, "the caller sees its whole write")
	require.Equal(t, "Bearer <redacted> and again <redacted>\n", buf.String())

	buf.Reset()
	_, err = output.NewRedactor(&buf, "").Write([]byte("plain\n"))
	require.NoError(t, err)
	require.Equal(t, "plain\n", buf.String())
}

func TestError(t *testing.T) {
	t.Parallel()
	cerr := connect.NewError(connect.CodeInvalidArgument, errors.New("job.schedule.cron: bad"))
	detail, err := connect.NewErrorDetail(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: "job.schedule.cron", Description: "bad"},
		{Field: "job.target", Description: "required"},
	}})
	require.NoError(t, err)
	cerr.AddDetail(detail)

	var buf bytes.Buffer
	output.Error(&buf, cerr)
	require.Equal(t, "error: invalid_argument: job.schedule.cron: bad\n  job.schedule.cron: bad\n  job.target: required\n", buf.String())

	buf.Reset()
	output.Error(&buf, errors.New("boom"))
	require.Equal(t, "error: boom\n", buf.String())
}
