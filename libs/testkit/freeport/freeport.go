// Package freeport finds loopback TCP ports that nothing listens on, for
// a server a test or a benchmark starts as another process (PostgreSQL,
// RabbitMQ, etcd, a service binary), which must be told its ports before
// it binds them.
//
// A port is free when it is returned and could be taken before the server
// binds it; the kernel hands ephemeral ports out at random, so that is
// rare, and the server then fails to start with a clear error.
package freeport

import (
	"fmt"
	"net"
)

// Ports returns n distinct loopback ports that were free a moment ago,
// for one server that needs several (RabbitMQ's AMQP and distribution
// ports): each is held until all are chosen, so the kernel cannot hand
// the same one out twice.
func Ports(n int) ([]int, error) {
	var (
		held  []net.Listener
		ports []int
	)
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		held = append(held, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Port returns a loopback port that was free a moment ago.
func Port() (int, error) {
	ports, err := Ports(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// Addr returns "127.0.0.1:port" for a port that was free a moment ago.
func Addr() (string, error) {
	port, err := Port()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", port), nil
}
