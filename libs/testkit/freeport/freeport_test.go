package freeport_test

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/testkit/freeport"
)

func TestAddrCanBeBound(t *testing.T) {
	addr, err := freeport.Addr()
	require.NoError(t, err)
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err, "the returned address is free")
	require.NoError(t, l.Close())
}
