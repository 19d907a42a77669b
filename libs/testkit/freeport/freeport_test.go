package freeport_test

import (
	"fmt"
	"net"
	"os"
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

// TestPortsAreBelowTheEphemeralRange: no outbound connection can be given
// a chosen port before its server binds it.
func TestPortsAreBelowTheEphemeralRange(t *testing.T) {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skipf("no ephemeral range to stay out of on this system: %v", err)
	}
	var first, last int
	_, err = fmt.Sscan(string(raw), &first, &last)
	require.NoError(t, err)
	ports, err := freeport.Ports(50)
	require.NoError(t, err)
	for _, p := range ports {
		require.Less(t, p, first, "port %d is below the ephemeral range %d-%d", p, first, last)
	}
}
