package rpctest_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
)

const procedure = "/test.v1.Echo/Echo"

// echo answers with the Authorization header it was given, or fails with
// InvalidArgument naming the field "value" when the value is "bad".
func echo(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
	if req.Msg.GetValue() == "bad" {
		cerr := connect.NewError(connect.CodeInvalidArgument, errors.New("value: bad"))
		d, err := connect.NewErrorDetail(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "value", Description: "bad"}}})
		if err != nil {
			return nil, err
		}
		cerr.AddDetail(d)
		return nil, cerr
	}
	return connect.NewResponse(wrapperspb.String(req.Header().Get("Authorization") + " " + req.Peer().Protocol)), nil
}

func TestClientBearerAndProtocols(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(procedure, connect.NewUnaryHandler(procedure, echo))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)

	for _, p := range rpctest.Protocols() {
		t.Run(p.Name, func(t *testing.T) {
			for key, want := range map[string]string{"k1": "Bearer k1 " + p.Name, "": " " + p.Name} {
				c := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](rpctest.H2CClient(), srv.URL+procedure,
					append([]connect.ClientOption{rpctest.Bearer(key)}, p.Opts...)...)
				resp, err := c.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("x")))
				require.NoError(t, err)
				require.Equal(t, want, resp.Msg.GetValue())

				_, err = c.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("bad")))
				require.Equal(t, []string{"value"}, rpctest.Violations(t, err))
				require.Equal(t, "value: bad", rpctest.RequireCode(t, err, connect.CodeInvalidArgument).Message())
			}
		})
	}
}
