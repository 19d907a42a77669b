package freeport_test

import (
	"fmt"
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

// TestPortsAreDistinctAndFree: the ports of one call can all be bound at
// once, as one server binds them.
func TestPortsAreDistinctAndFree(t *testing.T) {
	ports, err := freeport.Ports(8)
	require.NoError(t, err)
	require.Len(t, ports, 8)
	for _, p := range ports {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		require.NoError(t, err, "port %d is free and no other of the call's", p)
		defer l.Close()
	}
}
