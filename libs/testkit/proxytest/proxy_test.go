package proxytest_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/testkit/proxytest"
)

// echoServer answers every connection with what it reads.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes a byte and reads the echo, waiting at most wait.
func roundTrip(c net.Conn, wait time.Duration) error {
	if _, err := c.Write([]byte{'x'}); err != nil {
		return err
	}
	buf := make([]byte, 1)
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := io.ReadFull(c, buf)
	return err
}

func dial(t *testing.T, p *proxytest.Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestProxy(t *testing.T) {
	t.Parallel()
	p := proxytest.New(t, echoServer(t), false)
	c := dial(t, p)
	require.NoError(t, roundTrip(c, 5*time.Second))

	// A black hole answers nothing and reports nothing, on the connections
	// it had and on new ones.
	p.Blackhole()
	silence := 300 * time.Millisecond
	require.ErrorIs(t, roundTrip(c, silence), os.ErrDeadlineExceeded)
	held := dial(t, p)
	require.ErrorIs(t, roundTrip(held, silence), os.ErrDeadlineExceeded)

	// Up cuts what lived through it and carries new connections.
	p.Up()
	err := roundTrip(c, 5*time.Second)
	require.Error(t, err)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "a cut connection fails at once: %v", err)
	require.NoError(t, roundTrip(dial(t, p), 5*time.Second))

	// Down refuses: a new connection is closed at once.
	p.Down()
	err = roundTrip(dial(t, p), 5*time.Second)
	require.Error(t, err)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "refused, not silent: %v", err)
}

// TestNewURL: the URL through the proxy keeps the credentials, path and
// parameters, and reaches the server, on the default port when the URL
// names none.
func TestNewURL(t *testing.T) {
	t.Parallel()
	server := echoServer(t)
	_, port, err := net.SplitHostPort(server)
	require.NoError(t, err)
	for _, raw := range []string{"amqp://u:pw@" + server + "/vhost?x=1", "amqp://u:pw@127.0.0.1/vhost?x=1"} {
		p, through := proxytest.NewURL(t, raw, port, false)
		require.Equal(t, "amqp://u:pw@"+p.Addr()+"/vhost?x=1", through)
		require.NoError(t, roundTrip(dial(t, p), 5*time.Second))
	}
}
