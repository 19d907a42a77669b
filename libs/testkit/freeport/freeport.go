// Package freeport finds a loopback TCP port that nothing listens on, for
// a server a test or a benchmark starts as another process (PostgreSQL,
// RabbitMQ, etcd, a service binary), which must be told its port before it
// binds it.
//
// The port is free when it is returned and could be taken before the
// server binds it; the kernel hands ephemeral ports out in turn, so that
// is rare, and the server then fails to start with a clear error.
package freeport

import (
	"fmt"
	"net"
)

// Port returns a loopback port that was free a moment ago.
func Port() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr returns "127.0.0.1:port" for a port that was free a moment ago.
func Addr() (string, error) {
	port, err := Port()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", port), nil
}
