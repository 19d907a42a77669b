// Package rpctest is what a test needs to call a cronmesh service over
// Connect: an HTTP/2 cleartext (h2c) client, the bearer API key on every
// call, both wire protocols, and assertions on the Connect code and on the
// google.rpc.BadRequest field violations an InvalidArgument carries.
package rpctest

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// H2CClient speaks HTTP/2 without TLS, as gRPC clients do inside the mesh
// (gRPC needs HTTP/2; the services serve h2c on loopback).
func H2CClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// BearerInterceptor sends key as "Authorization: Bearer key" on every
// unary call; an empty key sends no header (an unauthenticated call).
func BearerInterceptor(key string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if key != "" {
				req.Header().Set("Authorization", "Bearer "+key)
			}
			return next(ctx, req)
		}
	}
}

// Bearer is BearerInterceptor as a client option.
func Bearer(key string) connect.ClientOption {
	return connect.WithInterceptors(BearerInterceptor(key))
}

// Protocol is one wire protocol a client can use.
type Protocol struct {
	Name string
	Opts []connect.ClientOption
}

// Protocols are the wire protocols every RPC test runs over: Connect and
// gRPC (the latter needs H2CClient).
func Protocols() []Protocol {
	return []Protocol{
		{"connect", nil},
		{"grpc", []connect.ClientOption{connect.WithGRPC()}},
	}
}

// RequireCode fails t unless err is a Connect error with code, and returns
// it for further checks.
func RequireCode(t testing.TB, err error, code connect.Code, msgAndArgs ...any) *connect.Error {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	var cerr *connect.Error
	require.True(t, errors.As(err, &cerr), "not a connect error: %v %v", err, msgAndArgs)
	require.Equal(t, code, cerr.Code(), "message: %s %v", cerr.Message(), msgAndArgs)
	return cerr
}

// Violations requires err to be InvalidArgument with a google.rpc.BadRequest
// detail naming at least one field, and returns the fields it names.
func Violations(t testing.TB, err error) []string {
	t.Helper()
	cerr := RequireCode(t, err, connect.CodeInvalidArgument)
	var fields []string
	for _, d := range cerr.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		if br, ok := v.(*errdetails.BadRequest); ok {
			for _, fv := range br.GetFieldViolations() {
				fields = append(fields, fv.GetField())
			}
		}
	}
	require.NotEmpty(t, fields, "InvalidArgument without a BadRequest field violation")
	return fields
}
