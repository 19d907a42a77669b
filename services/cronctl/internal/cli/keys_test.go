package cli

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
)

// fakeKeys answers GetCallerIdentity with the key the request carried.
type fakeKeys struct {
	registryv1connect.UnimplementedKeyServiceHandler
	authorization string
}

func (f *fakeKeys) GetCallerIdentity(_ context.Context, req *connect.Request[registryv1.GetCallerIdentityRequest]) (*connect.Response[registryv1.GetCallerIdentityResponse], error) {
	f.authorization = req.Header().Get("Authorization")
	return connect.NewResponse(&registryv1.GetCallerIdentityResponse{
		Namespace: "team-a", KeyId: "key_0123", Role: registryv1.KeyRole_KEY_ROLE_VIEWER,
	}), nil
}

func TestKeysWhoami(t *testing.T) {
	t.Parallel()
	fake := &fakeKeys{}
	mux := http.NewServeMux()
	mux.Handle(registryv1connect.NewKeyServiceHandler(fake))
	srv := newH2CServer(t, mux)
	vars := map[string]string{"CRONMESH_REGISTRY_URL": srv.URL}

	out, errOut, code := runAgainst(t, srv, vars, "keys", "whoami")
	require.Equal(t, ExitOK, code, errOut)
	assert.Equal(t, "Bearer unit-key-0123456789", fake.authorization)
	assert.Regexp(t, `namespace:?\s+team-a\n`, out)
	assert.Regexp(t, `key id:?\s+key_0123\n`, out)
	assert.Regexp(t, `role:?\s+viewer\n`, out)
	assert.Regexp(t, `key:?\s+managed\n`, out)

	out, errOut, code = runAgainst(t, srv, vars, "-o", "json", "keys", "whoami")
	require.Equal(t, ExitOK, code, errOut)
	assert.JSONEq(t, `{"namespace":"team-a","keyId":"key_0123","role":"KEY_ROLE_VIEWER"}`, out)

	_, errOut, code = runAgainst(t, srv, vars, "keys", "whoami", "extra")
	assert.Equal(t, ExitUsage, code, errOut)
}
